package io.ferrymq.bench;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.HdrHistogram.Histogram;
import org.HdrHistogram.Recorder;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;

/**
 * One scenario against whatever broker the name server at --namesrv routes to, with the upstream
 * RocketMQ client. Prints one line "RESULT {json}" (throughput, latency percentiles in
 * microseconds, counts). Every loop is bounded by --count and --seconds, whichever comes first.
 *
 * <p>Scenarios: sync (--threads), async (--window in flight), oneway, batch (--batch messages
 * per send, --threads), drain (push consumer from the first offset of a topic the caller filled
 * with "fill"), fill (batch sends of --count messages, no measurement), latency (open loop at
 * --rate msg/s, a push consumer in this JVM, latency from the scheduled send time),
 * connections (--connections raw remoting connections, one send in flight on each: see
 * {@link Connections}).
 */
public final class VsBench {
  private VsBench() {}

  public static void main(String[] argv) throws Exception {
    System.setProperty("rocketmq.client.logUseSlf4j", "false");
    Args args = new Args(argv);
    String scenario = args.str("scenario", "sync");
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("scenario", scenario);
    out.putAll(new LinkedHashMap<>(args.values));
    if (!scenario.equals("create-topic") && args.values.containsKey("create-queues")) {
      // the topic of this run first (one JVM start less per run)
      Args create = new Args(new String[0]);
      create.values.putAll(args.values);
      create.values.put("queues", args.values.get("create-queues"));
      createTopic(create, new LinkedHashMap<>());
    }
    switch (scenario) {
      case "create-topic" -> createTopic(args, out);
      case "sync" -> sync(args, out);
      case "async" -> async(args, out);
      case "oneway" -> oneway(args, out);
      case "batch" -> batch(args, out);
      case "fill" -> fill(args, out);
      case "drain" -> drain(args, out);
      case "latency" -> latency(args, out);
      case "connections" -> Connections.run(args, out);
      default -> throw new IllegalArgumentException("unknown scenario " + scenario);
    }
    Report.result(out);
    System.exit(0);
  }

  // --- clients --------------------------------------------------------------------------------

  static DefaultMQProducer producer(Args args, String group) throws Exception {
    DefaultMQProducer p = new DefaultMQProducer(group);
    p.setNamesrvAddr(args.str("namesrv", "127.0.0.1:9876"));
    p.setInstanceName(group + "-" + ProcessHandle.current().pid());
    // the broker is measured, not the client's zlib: bodies go as they are to both brokers
    p.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
    p.setSendMsgTimeout((int) args.num("timeout-ms", 10_000));
    p.setMaxMessageSize(4 * 1024 * 1024);
    p.start();
    return p;
  }

  static Message message(String topic, byte[] body) {
    return new Message(topic, "bench", body);
  }

  /** The masters' addresses from the name server's cluster info. */
  static List<String> masters(MQClientAPIImpl api) throws Exception {
    ClusterInfo info = api.getBrokerClusterInfo(10_000);
    List<String> addrs = new ArrayList<>();
    for (BrokerData data : info.getBrokerAddrTable().values()) {
      String addr = data.getBrokerAddrs().get(0L);
      if (addr != null) {
        addrs.add(addr);
      }
    }
    return addrs;
  }

  /** Creates --topic with --queues queues on every master and waits until it is routed. */
  static void createTopic(Args args, Map<String, Object> out) throws Exception {
    DefaultMQProducer p = producer(args, "vsbench_admin");
    try {
      String topic = args.str("topic", "VsBench");
      int queues = (int) args.num("queues", 8);
      MQClientAPIImpl api = p.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
      List<String> addrs = List.of();
      TopicConfig config = new TopicConfig(topic, queues, queues, 6);
      // retried: on a busy machine a first call may time out
      while (true) {
        try {
          addrs = masters(api);
          if (addrs.isEmpty()) {
            throw new IllegalStateException("no master registered at the name server");
          }
          for (String addr : addrs) {
            api.createTopic(addr, "TBW102", config, 30_000);
          }
          break;
        } catch (Exception e) {
          if (System.nanoTime() > deadline) {
            throw e;
          }
          Thread.sleep(500);
        }
      }
      while (true) {
        try {
          TopicRouteData route = api.getTopicRouteInfoFromNameServer(topic, 3_000);
          if (route != null && !route.getQueueDatas().isEmpty()) {
            out.put("masters", addrs.size());
            return;
          }
        } catch (Exception notYet) {
          // the broker registers the new topic with the name server asynchronously
        }
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("topic " + topic + " not routed within 60 s");
        }
        Thread.sleep(100);
      }
    } finally {
      p.shutdown();
    }
  }

  // --- producers ------------------------------------------------------------------------------

  interface Sender {
    /** One request; returns the number of messages it carried. */
    int send(DefaultMQProducer p) throws Exception;
  }

  /** Closed loop: --threads threads, each one request in flight, until --count or --seconds. */
  static long closedLoop(Args args, Map<String, Object> out, Sender sender, int perRequest)
      throws Exception {
    return closedLoop(args, out, sender, perRequest, true);
  }

  /** As above; returns the start time (System.nanoTime) of the measured window. */
  static long closedLoop(
      Args args, Map<String, Object> out, Sender sender, int perRequest, boolean markEnd)
      throws Exception {
    DefaultMQProducer p = producer(args, "vsbench_producer");
    warmUp(args, p, sender);
    try {
      return ClosedLoop.run(args, out, () -> sender.send(p), perRequest, true, markEnd);
    } finally {
      p.shutdown();
    }
  }

  static void warmUp(Args args, DefaultMQProducer p, Sender sender) throws Exception {
    // routes, connections and the JIT, outside the measured window; a busy machine may time out
    // the first route look-ups, so errors are retried for up to a minute
    long n = args.num("warmup", 2_000);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    Exception last = null;
    for (long done = 0; done < n; ) {
      try {
        sender.send(p);
        done++;
      } catch (Exception e) {
        last = e;
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("warm-up failed for a minute", last);
        }
        Thread.sleep(200);
      }
    }
  }

  static SendResult ok(SendResult r) {
    if (r.getSendStatus() != SendStatus.SEND_OK) {
      throw new IllegalStateException("send status " + r.getSendStatus());
    }
    return r;
  }

  static void sync(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench");
    byte[] body = args.body();
    closedLoop(args, out, p -> {
      ok(p.send(message(topic, body)));
      return 1;
    }, 1);
  }

  static void batch(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench");
    byte[] body = args.body();
    int n = (int) args.num("batch", 32);
    closedLoop(args, out, p -> {
      List<Message> msgs = new ArrayList<>(n);
      for (int i = 0; i < n; i++) {
        msgs.add(message(topic, body));
      }
      ok(p.send(msgs));
      return n;
    }, n);
  }

  /** Fills a backlog with batch sends from --threads threads (no figures but the count). */
  static void fill(Args args, Map<String, Object> out) throws Exception {
    batch(args, out);
  }

  static void async(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench");
    byte[] body = args.body();
    int window = (int) args.num("window", 1_000);
    long count = args.num("count", 200_000);
    long seconds = args.num("seconds", 20);
    DefaultMQProducer p = producer(args, "vsbench_producer");
    // the client's own cap on async sends in flight must not be the window
    p.setBackPressureForAsyncSendNum(Math.max(window * 2, 10_000));
    warmUp(args, p, q -> {
      ok(q.send(message(topic, body)));
      return 1;
    });
    Semaphore inFlight = new Semaphore(window);
    AtomicLong sent = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    Recorder recorder = new Recorder(3);
    Report.mark("start");
    long start = System.nanoTime();
    long deadline = start + TimeUnit.SECONDS.toNanos(seconds);
    long issued = 0;
    while (issued < count && System.nanoTime() < deadline) {
      inFlight.acquire();
      issued++;
      long t0 = System.nanoTime();
      p.send(message(topic, body), new SendCallback() {
        @Override
        public void onSuccess(SendResult r) {
          recorder.recordValue((System.nanoTime() - t0) / 1000);
          sent.incrementAndGet();
          inFlight.release();
        }

        @Override
        public void onException(Throwable e) {
          failed.incrementAndGet();
          out.putIfAbsent("first_error", String.valueOf(e));
          inFlight.release();
        }
      });
    }
    inFlight.acquire(window);
    double elapsed = (System.nanoTime() - start) / 1e9;
    Report.mark("end");
    p.shutdown();
    Report.putRate(out, sent.get(), failed.get(), elapsed, recorder);
  }

  /** Oneway sends from --threads threads. Nothing is acknowledged, so the figure is what the
   * broker stored (the topic's max offsets, summed, before and after) per second from the first
   * send until the stored count stops growing. */
  static void oneway(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench");
    byte[] body = args.body();
    DefaultMQProducer q = producer(args, "vsbench_counter");
    try {
      long before = storedMessages(q, topic);
      long start = closedLoop(args, out, p -> {
        p.sendOneway(message(topic, body));
        return 1;
      }, 1, false);
      long stored = storedMessages(q, topic);
      long previous = -1;
      long settled = System.nanoTime();
      for (int i = 0; i < 100 && stored != previous; i++) {
        previous = stored;
        settled = System.nanoTime();
        Thread.sleep(100);
        stored = storedMessages(q, topic);
      }
      Report.mark("end");
      double elapsed = (settled - start) / 1e9;
      out.put("client_written", out.get("messages"));
      out.put("messages", stored - before);
      out.put("elapsed_s", elapsed);
      out.put("msgs_per_s", (stored - before) / elapsed);
    } finally {
      q.shutdown();
    }
  }

  static long storedMessages(DefaultMQProducer p, String topic) throws Exception {
    long total = 0;
    for (var mq : p.fetchPublishMessageQueues(topic)) {
      total += p.maxOffset(mq);
    }
    return total;
  }

  // --- consumers ------------------------------------------------------------------------------

  static DefaultMQPushConsumer consumer(Args args, String group, String topic) throws Exception {
    DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
    c.setNamesrvAddr(args.str("namesrv", "127.0.0.1:9876"));
    c.setInstanceName(group + "-" + ProcessHandle.current().pid());
    c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
    c.setPullBatchSize(32);
    c.setConsumeMessageBatchMaxSize(32);
    c.setConsumeThreadMin(4);
    c.setConsumeThreadMax(4);
    c.subscribe(topic, "*");
    return c;
  }

  /** A push consumer of a new group drains --count messages of the backlog in --topic. */
  static void drain(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench");
    long count = args.num("count", 200_000);
    long seconds = args.num("seconds", 60);
    AtomicLong got = new AtomicLong();
    AtomicLong firstNs = new AtomicLong();
    CountDownLatch done = new CountDownLatch(1);
    DefaultMQPushConsumer c = consumer(args, "vsbench_drain_" + System.nanoTime(), topic);
    c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
      firstNs.compareAndSet(0, System.nanoTime());
      if (got.addAndGet(msgs.size()) >= count) {
        done.countDown();
      }
      return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
    });
    Report.mark("start");
    long start = System.nanoTime();
    c.start();
    done.await(seconds, TimeUnit.SECONDS);
    long end = System.nanoTime();
    Report.mark("end");
    c.shutdown();
    // from the first message on: rebalance and the first pull's set-up are not the broker's rate
    double elapsed = (end - (firstNs.get() == 0 ? start : firstNs.get())) / 1e9;
    out.put("messages", got.get());
    out.put("elapsed_s", elapsed);
    out.put("msgs_per_s", got.get() / elapsed);
    out.put("startup_s", (firstNs.get() == 0 ? end - start : firstNs.get() - start) / 1e9);
  }

  /** Open loop at --rate msg/s for --seconds: async sends at their scheduled times, a push
   * consumer in this JVM; latency from the scheduled time (no coordinated omission). */
  static void latency(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench");
    long rate = args.num("rate", 2_000);
    long seconds = args.num("seconds", 20);
    long total = Math.min(args.num("count", Long.MAX_VALUE), rate * seconds);
    byte[] body = args.body();
    OpenLoop loop = new OpenLoop(out);
    DefaultMQPushConsumer c = consumer(args, "vsbench_latency_" + System.nanoTime(), topic);
    c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
    c.setConsumeMessageBatchMaxSize(1);
    c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
      long now = System.nanoTime();
      for (MessageExt m : msgs) {
        loop.received(ByteBuffer.wrap(m.getBody()), now);
      }
      return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
    });
    c.start();
    DefaultMQProducer p = producer(args, "vsbench_producer");
    p.setBackPressureForAsyncSendNum(100_000);
    // warm-up: routes, connections, the consumer's rebalance
    for (int i = 0; i < 200; i++) {
      ok(p.send(message(topic, body)));
    }
    Thread.sleep(2_000);
    SendCallback callback = new SendCallback() {
      @Override
      public void onSuccess(SendResult r) {}

      @Override
      public void onException(Throwable e) {
        loop.failed(e);
      }
    };
    loop.run(rate, total, body, b -> {
      try {
        p.send(message(topic, b), callback);
      } catch (Exception e) {
        loop.failed(e);
      }
    });
    p.shutdown();
    c.shutdown();
  }
}
