package io.ferrymq.bench;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.HdrHistogram.Histogram;
import org.HdrHistogram.Recorder;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * One scenario of the RocketMQ 5.x Java client (rocketmq-client-java, gRPC) against the proxy at
 * --endpoint: the 5.x counterpart of {@link VsBench}, with the same output (MARK start / MARK end
 * around the measured window, one "RESULT {json}" line; {@link Report}). The topic exists already
 * (the runner creates it). Every loop is bounded by --count and --seconds.
 *
 * <p>Scenarios:
 *
 * <ul>
 *   <li>send: --threads threads of sync {@code Producer.send}, --size bytes (1 KiB).
 *   <li>drain: a SimpleConsumer of a new group first receives once (the group's offsets start at
 *       the end of each queue, as upstream's ReceiveMessage does for a new group), then --count
 *       messages are written (--fill-threads sync senders, not measured), then --threads threads
 *       receive batches of --batch (invisible --invisible-s) and ack each message; the rate is
 *       from the first message received.
 *   <li>latency: open loop at --rate msg/s ({@code sendAsync} at the scheduled times) and a
 *       SimpleConsumer in this JVM (--threads receivers, acks async); latency from the scheduled
 *       send time to the receive (no coordinated omission).
 * </ul>
 */
public final class VsBench5 {
  private VsBench5() {}

  static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

  public static void main(String[] argv) throws Exception {
    Args args = new Args(argv);
    String scenario = args.str("scenario", "send");
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("scenario", scenario);
    out.putAll(new LinkedHashMap<>(args.values));
    switch (scenario) {
      case "send" -> send(args, out);
      case "drain" -> drain(args, out);
      case "latency" -> latency(args, out);
      default -> throw new IllegalArgumentException("unknown scenario " + scenario);
    }
    Report.result(out);
    closeAll();
    System.exit(0);
  }

  /** Clients closed after the RESULT line (a consumer's receiver may still wait in a long
   * poll): NotifyClientTermination to the proxy, bounded, since the run's figures are out. */
  static final List<AutoCloseable> OPEN = new ArrayList<>();

  static <T extends AutoCloseable> T opened(T client) {
    OPEN.add(client);
    return client;
  }

  static void closeAll() throws InterruptedException {
    Thread closer = new Thread(() -> {
      for (AutoCloseable c : OPEN) {
        try {
          c.close();
        } catch (Exception ignored) {
          // the figures are printed; a failed close changes nothing
        }
      }
    });
    closer.setDaemon(true);
    closer.start();
    closer.join(10_000);
  }

  // --- clients --------------------------------------------------------------------------------

  static ClientConfiguration config(Args args) {
    return ClientConfiguration.newBuilder()
        .setEndpoints(args.str("endpoint", "127.0.0.1:8081"))
        .setRequestTimeout(Duration.ofMillis(args.num("timeout-ms", 10_000)))
        .build();
  }

  static Producer producer(Args args, String topic) throws Exception {
    return PROVIDER.newProducerBuilder()
        .setClientConfiguration(config(args))
        .setTopics(topic)
        .build();
  }

  static SimpleConsumer simpleConsumer(Args args, String group, String topic) throws Exception {
    return PROVIDER.newSimpleConsumerBuilder()
        .setClientConfiguration(config(args))
        .setConsumerGroup(group)
        // long polling: an empty receive waits this long for messages
        .setAwaitDuration(Duration.ofMillis(args.num("await-ms", 2_000)))
        .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL))
        .build();
  }

  static Message message(String topic, byte[] body) {
    return PROVIDER.newMessageBuilder().setTopic(topic).setTag("bench").setBody(body).build();
  }

  /** --warmup sync sends (routes, the gRPC channel, the JIT) outside the measured window; a busy
   * machine may fail the first calls, so errors are retried for up to a minute. */
  static void warmUp(Args args, Producer p, String topic, byte[] body) throws Exception {
    long n = args.num("warmup", 2_000);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    for (long done = 0; done < n; ) {
      try {
        p.send(message(topic, body));
        done++;
      } catch (Exception e) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("warm-up failed for a minute", e);
        }
        Thread.sleep(200);
      }
    }
  }

  /** One receive of a new group before anything is written, so that its offsets exist (a new
   * group starts at the end of each queue); retried while the proxy is still starting up. */
  static void prime(SimpleConsumer c) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (true) {
      try {
        for (MessageView v : c.receive(32, Duration.ofSeconds(30))) {
          c.ack(v);
        }
        return;
      } catch (Exception e) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("the first receive failed for a minute", e);
        }
        Thread.sleep(200);
      }
    }
  }

  // --- scenarios ------------------------------------------------------------------------------

  /** Sync sends of --size bytes in a closed loop (ClosedLoop: --threads, --count, --seconds). */
  static void sendLoop(Args args, Map<String, Object> out, Producer p, String topic, byte[] body,
      boolean marks) throws InterruptedException {
    ClosedLoop.run(args, out, () -> {
      p.send(message(topic, body));
      return 1;
    }, 1, marks, marks);
  }

  static void send(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench5");
    byte[] body = args.body();
    try (Producer p = producer(args, topic)) {
      warmUp(args, p, topic, body);
      sendLoop(args, out, p, topic, body, true);
    }
  }

  static void drain(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench5");
    long seconds = args.num("seconds", 60);
    int threads = (int) args.num("threads", 4);
    int batch = (int) args.num("batch", 32);
    Duration invisible = Duration.ofSeconds(args.num("invisible-s", 30));
    String group = "vsbench5_drain_" + System.nanoTime();
    SimpleConsumer c = opened(simpleConsumer(args, group, topic));
    prime(c);
    // the backlog, written through the same proxy before the window (its figures: "fill_*")
    try (Producer p = producer(args, topic)) {
      Args fill = new Args(new String[0]);
      fill.values.putAll(args.values);
      fill.values.put("threads", args.str("fill-threads", "16"));
      fill.values.put("seconds", "600");
      Map<String, Object> filled = new LinkedHashMap<>();
      sendLoop(fill, filled, p, topic, args.body(), false);
      out.put("fill_messages", filled.get("messages"));
      out.put("fill_msgs_per_s", filled.get("msgs_per_s"));
      out.put("fill_failed", filled.get("failed_requests"));
    }
    long backlog = ((Number) out.get("fill_messages")).longValue();
    AtomicLong acked = new AtomicLong();
    AtomicLong received = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    AtomicLong firstNs = new AtomicLong();
    CountDownLatch done = new CountDownLatch(1);
    Recorder ackLatency = new Recorder(3);
    Report.mark("start");
    long start = System.nanoTime();
    long deadline = start + TimeUnit.SECONDS.toNanos(seconds);
    for (int t = 0; t < threads; t++) {
      Thread w = new Thread(() -> {
        while (acked.get() < backlog && System.nanoTime() < deadline) {
          List<MessageView> views;
          try {
            views = c.receive(batch, invisible);
          } catch (Exception e) {
            failed.incrementAndGet();
            out.putIfAbsent("first_error", String.valueOf(e));
            continue;
          }
          if (!views.isEmpty()) {
            firstNs.compareAndSet(0, System.nanoTime());
            received.addAndGet(views.size());
          }
          for (MessageView v : views) {
            long t0 = System.nanoTime();
            try {
              c.ack(v);
              ackLatency.recordValue((System.nanoTime() - t0) / 1000);
              if (acked.incrementAndGet() >= backlog) {
                done.countDown();
              }
            } catch (Exception e) {
              failed.incrementAndGet();
              out.putIfAbsent("first_error", String.valueOf(e));
            }
          }
        }
      });
      w.setDaemon(true); // one may still wait in a long poll when the count is reached
      w.start();
    }
    done.await(seconds, TimeUnit.SECONDS);
    long end = System.nanoTime();
    Report.mark("end");
    double elapsed = (end - (firstNs.get() == 0 ? start : firstNs.get())) / 1e9;
    out.put("messages", acked.get());
    out.put("received", received.get());
    out.put("failed_requests", failed.get());
    out.put("elapsed_s", elapsed);
    out.put("msgs_per_s", acked.get() / elapsed);
    out.put("startup_s", (firstNs.get() == 0 ? end - start : firstNs.get() - start) / 1e9);
    Report.putLatency(out, "request_latency_us", ackLatency.getIntervalHistogram());
  }

  static void latency(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench5");
    long rate = args.num("rate", 500);
    long seconds = args.num("seconds", 20);
    long total = Math.min(args.num("count", Long.MAX_VALUE), rate * seconds);
    int threads = (int) args.num("threads", 4);
    byte[] body = args.body();
    OpenLoop loop = new OpenLoop(out);
    AtomicBoolean stop = new AtomicBoolean();
    String group = "vsbench5_latency_" + System.nanoTime();
    SimpleConsumer c = opened(simpleConsumer(args, group, topic));
    Producer p = opened(producer(args, topic));
    prime(c);
    for (int t = 0; t < threads; t++) {
      Thread r = new Thread(() -> {
        while (!stop.get()) {
          List<MessageView> views;
          try {
            views = c.receive(32, Duration.ofSeconds(30));
          } catch (Exception e) {
            out.putIfAbsent("first_receive_error", String.valueOf(e));
            continue;
          }
          long now = System.nanoTime();
          for (MessageView v : views) {
            loop.received(v.getBody().duplicate(), now);
            c.ackAsync(v).whenComplete((ok, e) -> {
              if (e != null) {
                out.putIfAbsent("first_ack_error", String.valueOf(e));
              }
            });
          }
        }
      });
      r.setDaemon(true);
      r.start();
    }
    // warm-up: routes, the gRPC channels, the receivers' first long polls
    warmUp(args, p, topic, body);
    Thread.sleep(2_000);
    loop.run(rate, total, body, b -> p.sendAsync(message(topic, b)).whenComplete((r, e) -> {
      if (e != null) {
        loop.failed(e);
      }
    }));
    stop.set(true);
  }
}
