package io.ferrymq.bench;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Consumer;

import org.HdrHistogram.Histogram;

/**
 * The open loop of both generators' latency scenarios: sends at their scheduled times (--rate
 * msg/s), each body starting with its scheduled time and this run's id; a consumer in the same
 * JVM reports what it receives, and the latency is measured from the scheduled time (no
 * coordinated omission). Messages of earlier runs or of the warm-up carry another id.
 */
final class OpenLoop {
  final long runId = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
  private final Histogram hist = new Histogram(TimeUnit.SECONDS.toMicros(60), 3);
  private final AtomicLong received = new AtomicLong();
  private final AtomicLong failed = new AtomicLong();
  private final Map<String, Object> out;

  OpenLoop(Map<String, Object> out) {
    this.out = out;
  }

  /** A consumed body, received at {@code nowNs}: counted when it is one of this run's. */
  void received(ByteBuffer body, long nowNs) {
    long scheduled = body.getLong();
    if (body.getLong() == runId) {
      synchronized (hist) {
        hist.recordValue(Math.max(0, (nowNs - scheduled) / 1000));
      }
      received.incrementAndGet();
    }
  }

  /** A send that failed (it will never be received). */
  void failed(Throwable e) {
    failed.incrementAndGet();
    out.putIfAbsent("first_error", String.valueOf(e));
  }

  /** MARK start, {@code total} sends of {@code body} at {@code rate} msg/s through {@code send}
   * (asynchronous: it must not wait for the answer), then up to 30 s for every message to be
   * received or failed, MARK end; the figures go to the RESULT map. */
  void run(long rate, long total, byte[] body, Consumer<byte[]> send) throws InterruptedException {
    long interval = 1_000_000_000L / rate;
    Report.mark("start");
    long t0 = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(100);
    for (long i = 0; i < total; i++) {
      long at = t0 + i * interval;
      long wait;
      while ((wait = at - System.nanoTime()) > 0) {
        LockSupport.parkNanos(wait);
      }
      byte[] b = body.clone();
      ByteBuffer.wrap(b).putLong(at).putLong(runId);
      send.accept(b);
    }
    double sendSeconds = (System.nanoTime() - t0) / 1e9;
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (received.get() + failed.get() < total && System.nanoTime() < deadline) {
      Thread.sleep(50);
    }
    Report.mark("end");
    out.put("messages", received.get());
    out.put("failed_requests", failed.get());
    out.put("achieved_rate", total / sendSeconds);
    out.put("msgs_per_s", total / sendSeconds);
    synchronized (hist) {
      Report.putLatency(out, "e2e_latency_us", hist);
    }
  }
}
