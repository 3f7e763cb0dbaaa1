"""Consumer-lag settings, read like the rest of the broker's: broker.conf keys, ``FERRYMQ_<key>``
environment, overrides. Milliseconds as upstream spells its intervals."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from ferrymq.broker.lag.status import Rules


class LagConfig(BaseModel):
    """``consumerLag*`` keys. The sample window is the Burrow evaluation window."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    consumer_lag_enable: bool = True
    consumer_lag_sample_interval: int = Field(default=10_000, ge=100, description="ms")
    consumer_lag_window: int = Field(default=300_000, ge=200, description="ms")
    """Burrow's evaluation window: a queue is judged on the samples of the last window."""
    consumer_lag_eta_window: int = Field(default=60_000, ge=200, description="ms")
    """The ETA's drain rate is measured over this much of the newest samples."""
    consumer_lag_min_samples: int = Field(default=3, ge=2)
    consumer_lag_tolerance: int = Field(default=64, ge=0, description="messages")
    consumer_lag_per_queue_metrics: bool = False
    """Opt-in: per-queue lag series (``queue_id`` label), at most consumerLagMaxQueueSeries."""
    consumer_lag_max_queue_series: int = Field(default=1000, ge=0)
    consumer_lag_max_group_topics: int = Field(default=5000, ge=1)
    """At most this many (group, topic) pairs are sampled; the rest are counted as dropped."""

    @model_validator(mode="after")
    def _window_holds_samples(self) -> LagConfig:
        need = self.consumer_lag_sample_interval * (self.consumer_lag_min_samples - 1)
        if self.consumer_lag_window < need:
            raise ValueError(
                f"consumerLagWindow ({self.consumer_lag_window} ms) must hold "
                f"consumerLagMinSamples={self.consumer_lag_min_samples} samples taken every "
                f"consumerLagSampleInterval={self.consumer_lag_sample_interval} ms "
                f"(at least {need} ms)"
            )
        return self

    def rules(self) -> Rules:
        return Rules(
            min_samples=self.consumer_lag_min_samples, lag_tolerance=self.consumer_lag_tolerance
        )
