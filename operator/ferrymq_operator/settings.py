"""Operator start-up settings, from ``FERRYMQ_OPERATOR_*`` environment variables."""

from __future__ import annotations

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    """Read once at start-up and handed to the reconciler; never re-read inside loops."""

    model_config = SettingsConfigDict(env_prefix="FERRYMQ_OPERATOR_", extra="ignore")

    cluster_domain: str = Field(
        default="cluster.local",
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="DNS suffix of Services in the cluster (namesrvAddr uses pod DNS names).",
    )
    resync_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Interval of the drift-correcting reconcile of every custom resource.",
    )
    field_manager: str = Field(default="ferrymq-operator", min_length=1)
    kubeconfig: str | None = Field(
        default=None, description="kubeconfig path; in-cluster config, then $KUBECONFIG when unset."
    )
    admin_timeout_seconds: float = Field(default=5.0, gt=0)
    rollout_stall_seconds: float = Field(
        default=600.0,
        gt=0,
        description="A rolled pod not Ready (or its slave not caught up) after this: Degraded.",
    )
    rollout_max_lag_bytes: int = Field(
        default=1024 * 1024,
        ge=0,
        description="Replication lag a slave may have to count caught up.",
    )
    leader_lease: str = Field(
        default="ferrymq-operator",
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Name of the leader-election Lease (in POD_NAMESPACE).",
    )
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of the operator's /metrics (prometheus-client); 0: not served.",
    )
    retry_delay_seconds: float = Field(
        default=15.0, gt=0, description="Delay before retrying after a transient API error."
    )


class SettingsError(ValueError):
    """The operator's environment holds a value it cannot run with (named by variable)."""


def load() -> OperatorSettings:
    """Read the settings from the environment now (at operator start-up, never at import).

    A bad value raises :class:`SettingsError` naming the environment variable, what is wrong and
    the value given, so that the operator stops with a message a user can act on.
    """
    try:
        return OperatorSettings()
    except ValidationError as error:
        prefix = OperatorSettings.model_config.get("env_prefix", "")
        problems = [
            f"{prefix}{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']} "
            f"(got {e.get('input')!r})"
            for e in error.errors()
        ]
        raise SettingsError("bad operator settings: " + "; ".join(problems)) from error
