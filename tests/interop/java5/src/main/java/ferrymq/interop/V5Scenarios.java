package ferrymq.interop;

import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * One RocketMQ 5.x client scenario per run, against the proxy at the given endpoint:
 * {@code V5Scenarios <endpoint> <scenario> <args...>}. Every observation is one JSON line on
 * stdout ({"event": ...}); the Python test compares them between Apache's proxy and ferrymq's.
 * Waits are bounded by the deadline given on the command line; nothing is timed for a verdict.
 */
public final class V5Scenarios {
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    private static ClientConfiguration config;
    private static long deadline;
    /** Bodies start with this run's nonce: messages of earlier runs on the topic are skipped. */
    private static final String NONCE = Long.toHexString(System.nanoTime()) + ":";

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String scenario = args[1];
        deadline = System.currentTimeMillis() + Long.parseLong(args[2]) * 1000L;
        config = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        String[] rest = java.util.Arrays.copyOfRange(args, 3, args.length);
        try {
            switch (scenario) {
                case "normal": normal(rest[0], rest[1]); break;
                case "fifo": fifo(rest[0], rest[1], Integer.parseInt(rest[2])); break;
                case "delay": delay(rest[0], rest[1], Long.parseLong(rest[2])); break;
                case "tx": tx(rest[0], rest[1]); break;
                case "invisible": invisible(rest[0], rest[1]); break;
                case "change": change(rest[0], rest[1]); break;
                case "push_dlq": pushDlq(rest[0], rest[1], rest[2], Integer.parseInt(rest[3])); break;
                case "renew": renew(rest[0], rest[1], Long.parseLong(rest[2]), Long.parseLong(rest[3])); break;
                case "bad": bad(rest[0], rest[1], rest[2]); break;
                default: throw new IllegalArgumentException("unknown scenario " + scenario);
            }
            emit("done", kv());
        } catch (Throwable t) {
            StringBuilder causes = new StringBuilder();
            for (Throwable c = t.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
                causes.append(c.getClass().getName()).append(": ").append(c.getMessage()).append(" <- ");
            }
            emit("error", kv("type", t.getClass().getName(), "message", String.valueOf(t.getMessage()),
                "causes", causes.toString()));
            System.out.flush();
            System.exit(2);
        }
        System.out.flush();
        System.exit(0);
    }

    // --- scenarios ------------------------------------------------------------------------------
    static void normal(String topic, String group) throws Exception {
        try (Producer producer = producer(topic, false)) {
            SendReceipt r = producer.send(PROVIDER.newMessageBuilder().setTopic(topic).setTag("TagA")
                .setKeys("k1", "k2").addProperty("pk", "pv").setBody(bytes("normal-1")).build());
            emit("sent", kv("id", r.getMessageId().toString()));
        }
        try (SimpleConsumer consumer = simple(topic, group)) {
            for (MessageView v : receiveUntil(consumer, 1, Duration.ofSeconds(15))) {
                emit("received", view(v));
                consumer.ack(v);
                emit("acked", kv("id", v.getMessageId().toString()));
            }
        }
    }

    static void fifo(String topic, String group, int n) throws Exception {
        List<String> order = new ArrayList<>();
        try (SimpleConsumer consumer = simple(topic, group)) {
            // the consumer is there before the messages: its group's position in the queue is
            // set by this first receive, so all n messages are new to it (brokers differ in
            // where a group's first POP starts when messages were there before it)
            for (MessageView v : consumer.receive(1, Duration.ofSeconds(20))) {
                consumer.ack(v);
            }
            try (Producer producer = producer(topic, false)) {
                for (int i = 0; i < n; i++) {
                    producer.send(PROVIDER.newMessageBuilder().setTopic(topic).setTag("F")
                        .setMessageGroup("g1").setBody(bytes("fifo-" + i)).build());
                }
                emit("sent", kv("count", String.valueOf(n)));
            }
            while (order.size() < n && System.currentTimeMillis() < deadline) {
                for (MessageView v : consumer.receive(1, Duration.ofSeconds(20))) {
                    if (!mine(consumer, v)) {
                        continue;
                    }
                    order.add(text(v));
                    emit("received", view(v));
                    consumer.ack(v);
                }
            }
        }
        emit("order", kv("bodies", String.join(",", order)));
    }

    static void delay(String topic, String group, long delayMs) throws Exception {
        long target;
        try (Producer producer = producer(topic, false)) {
            target = System.currentTimeMillis() + delayMs;
            SendReceipt r = producer.send(PROVIDER.newMessageBuilder().setTopic(topic)
                .setDeliveryTimestamp(target).setBody(bytes("delay-1")).build());
            emit("sent", kv("id", r.getMessageId().toString(), "target", String.valueOf(target)));
        }
        try (SimpleConsumer consumer = simple(topic, group)) {
            for (MessageView v : receiveUntil(consumer, 1, Duration.ofSeconds(15))) {
                long at = System.currentTimeMillis();
                Map<String, String> o = view(v);
                o.put("received_at", String.valueOf(at));
                o.put("target", String.valueOf(target));
                emit("received", o);
                consumer.ack(v);
            }
        }
    }

    static void tx(String topic, String group) throws Exception {
        Set<String> checked = ConcurrentHashMap.newKeySet();
        Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config).setTopics(topic)
            .setTransactionChecker(v -> {
                if (!raw(v).startsWith(NONCE)) {
                    return TransactionResolution.COMMIT;  // an earlier run's orphan
                }
                checked.add(text(v));
                emit("check", kv("body", text(v), "id", v.getMessageId().toString()));
                return TransactionResolution.COMMIT;
            }).build();
        try {
            for (String what : new String[] {"rollback", "commit", "orphan"}) {
                Transaction t = producer.beginTransaction();
                SendReceipt r = producer.send(PROVIDER.newMessageBuilder().setTopic(topic)
                    .setBody(bytes(what)).build(), t);
                emit("sent", kv("body", what, "id", r.getMessageId().toString()));
                if (what.equals("commit")) {
                    t.commit();
                } else if (what.equals("rollback")) {
                    t.rollback();
                }
            }
            Set<String> got = new HashSet<>();
            try (SimpleConsumer consumer = simple(topic, group)) {
                while (!(got.contains("commit") && got.contains("orphan")) && System.currentTimeMillis() < deadline) {
                    for (MessageView v : consumer.receive(8, Duration.ofSeconds(20))) {
                        if (!mine(consumer, v)) {
                            continue;
                        }
                        got.add(text(v));
                        emit("received", view(v));
                        consumer.ack(v);
                    }
                }
            }
            emit("checked", kv("bodies", String.join(",", new TreeMap<>(toMap(checked)).keySet())));
        } finally {
            producer.close();
        }
    }

    static void invisible(String topic, String group) throws Exception {
        try (Producer producer = producer(topic, false)) {
            for (int i = 0; i < 3; i++) {
                producer.send(PROVIDER.newMessageBuilder().setTopic(topic).setBody(bytes("inv-" + i)).build());
            }
        }
        try (SimpleConsumer consumer = simple(topic, group)) {
            String held = null;
            int got = 0;
            while (got < 3 && System.currentTimeMillis() < deadline) {
                for (MessageView v : consumer.receive(3, Duration.ofSeconds(10))) {
                    if (!mine(consumer, v)) {
                        continue;
                    }
                    got++;
                    emit("received", view(v));
                    if (held == null) {
                        held = v.getMessageId().toString();
                        emit("held", kv("id", held));
                    } else {
                        consumer.ack(v);
                    }
                }
            }
            while (System.currentTimeMillis() < deadline) {
                for (MessageView v : consumer.receive(3, Duration.ofSeconds(10))) {
                    if (!mine(consumer, v)) {
                        continue;
                    }
                    emit("again", view(v));
                    consumer.ack(v);
                    if (v.getMessageId().toString().equals(held)) {
                        return;
                    }
                }
            }
        }
    }

    static void change(String topic, String group) throws Exception {
        try (Producer producer = producer(topic, false)) {
            producer.send(PROVIDER.newMessageBuilder().setTopic(topic).setBody(bytes("change-1")).build());
        }
        try (SimpleConsumer consumer = simple(topic, group)) {
            for (MessageView v : receiveUntil(consumer, 1, Duration.ofSeconds(10))) {
                String before = handle(v);
                consumer.changeInvisibleDuration(v, Duration.ofSeconds(30));
                String after = handle(v);
                emit("changed", kv("same_handle", String.valueOf(before.equals(after)),
                    "handle_fields", String.valueOf(after.split(" ").length)));
                consumer.ack(v);
                emit("acked", kv("id", v.getMessageId().toString()));
            }
        }
    }

    static void pushDlq(String topic, String group, String dlqGroup, int expectAttempts) throws Exception {
        String id;
        try (Producer producer = producer(topic, false)) {
            id = producer.send(PROVIDER.newMessageBuilder().setTopic(topic).setBody(bytes("dlq-1")).build())
                .getMessageId().toString();
            emit("sent", kv("id", id));
        }
        AtomicInteger attempts = new AtomicInteger();
        PushConsumer push = push(topic, group, v -> {
            attempts.incrementAndGet();
            emit("attempt", kv("id", v.getMessageId().toString(), "attempt", String.valueOf(v.getDeliveryAttempt())));
            return ConsumeResult.FAILURE;
        });
        try {
            // the DLQ topic exists once the proxy moved the message there (on the pop after
            // the last attempt): until then a consumer of it cannot start
            SimpleConsumer dlq = null;
            while (dlq == null && System.currentTimeMillis() < deadline) {
                if (attempts.get() < expectAttempts) {
                    Thread.sleep(200);
                    continue;
                }
                try {
                    dlq = simple("%DLQ%" + group, dlqGroup);
                } catch (Exception e) {
                    Thread.sleep(1000);
                }
            }
            if (dlq == null) {
                emit("dlq_missing", kv("attempts_seen", String.valueOf(attempts.get())));
                return;
            }
            try {
                while (System.currentTimeMillis() < deadline) {
                    for (MessageView v : dlq.receive(1, Duration.ofSeconds(10))) {
                        if (!mine(dlq, v)) {
                            continue;
                        }
                        Map<String, String> o = view(v);
                        o.put("attempts_seen", String.valueOf(attempts.get()));
                        emit("dlq", o);
                        dlq.ack(v);
                        return;
                    }
                }
            } finally {
                dlq.close();
            }
        } finally {
            push.close();
        }
    }

    /**
     * A PushConsumer whose listener works on the first delivery for {@code holdMs}, longer than
     * the proxy's defaultInvisibleTimeMills: the proxy renews the message's invisibility meanwhile
     * (the client sends auto_renew), so it is not delivered again while held, and the ack with the
     * handle the client was given is accepted. After the listener returns, {@code watchMs} more
     * in which a redelivery would show.
     */
    static void renew(String topic, String group, long holdMs, long watchMs) throws Exception {
        try (Producer producer = producer(topic, false)) {
            emit("sent", kv("id", producer.send(PROVIDER.newMessageBuilder().setTopic(topic)
                .setBody(bytes("renew-1")).build()).getMessageId().toString()));
        }
        AtomicInteger deliveries = new AtomicInteger();
        java.util.concurrent.CountDownLatch held = new java.util.concurrent.CountDownLatch(1);
        PushConsumer push = push(topic, group, v -> {
            int n = deliveries.incrementAndGet();
            emit("attempt", kv("id", v.getMessageId().toString(), "attempt", String.valueOf(v.getDeliveryAttempt())));
            if (n == 1) {
                try {
                    Thread.sleep(holdMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                emit("released", kv("deliveries_meanwhile", String.valueOf(deliveries.get() - 1)));
                held.countDown();
            }
            return ConsumeResult.SUCCESS;
        });
        try {
            long left = deadline - System.currentTimeMillis();
            if (!held.await(Math.max(left, 0), java.util.concurrent.TimeUnit.MILLISECONDS)) {
                emit("never_delivered", kv());
                return;
            }
            Thread.sleep(watchMs);  // the window in which a redelivery would come
            emit("watched", kv("deliveries", String.valueOf(deliveries.get())));
        } finally {
            push.close();
        }
    }

    static void bad(String normalTopic, String fifoTopic, String group) throws Exception {
        try (Producer producer = producer(normalTopic, false)) {
            try {
                producer.send(PROVIDER.newMessageBuilder().setTopic(normalTopic).setMessageGroup("g")
                    .setBody(bytes("x")).build());
                emit("fifo_to_normal", kv("outcome", "sent"));
            } catch (Throwable t) {
                emit("fifo_to_normal", kv("type", t.getClass().getName(), "message", String.valueOf(t.getMessage())));
            }
        }
        try (SimpleConsumer consumer = simple(normalTopic, group)) {
            try {
                consumer.receive(1, Duration.ofSeconds(5));
                emit("invisible_5s", kv("outcome", "received"));
            } catch (Throwable t) {
                emit("invisible_5s", kv("type", t.getClass().getName(), "message", strip(t.getMessage())));
            }
        }
        try {
            PROVIDER.newProducerBuilder().setClientConfiguration(config).setTopics("NoSuchTopicV5")
                .build().close();
            emit("unknown_topic", kv("outcome", "started"));
        } catch (Throwable t) {
            emit("unknown_topic", kv("type", t.getClass().getName()));
        }
    }

    // --- helpers --------------------------------------------------------------------------------
    static Producer producer(String topic, boolean unused) throws Exception {
        return startRetrying(() -> PROVIDER.newProducerBuilder().setClientConfiguration(config)
            .setTopics(topic).build());
    }

    /** A PushConsumer of every tag of {@code topic} whose listener gives this run's messages to
     * {@code ours} (earlier runs' messages on the topic are consumed and skipped). */
    static PushConsumer push(String topic, String group,
        java.util.function.Function<MessageView, ConsumeResult> ours) throws Exception {
        return PROVIDER.newPushConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setMessageListener(v -> raw(v).startsWith(NONCE) ? ours.apply(v) : ConsumeResult.SUCCESS)
            .build();
    }

    static SimpleConsumer simple(String topic, String group) throws Exception {
        return startRetrying(() -> PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(5))
            .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .build());
    }

    interface Start<T> {
        T start() throws Exception;
    }

    /**
     * A client whose start-up timed out (the client gives its first calls about a second and a
     * half; a loaded 2-core machine can take longer to connect) is started again, within the
     * deadline; any other failure is the scenario's.
     */
    static <T> T startRetrying(Start<T> start) throws Exception {
        while (true) {
            try {
                return start.start();
            } catch (IllegalStateException e) {
                String why = String.valueOf(e.getCause());
                if (!why.contains("DEADLINE_EXCEEDED") || System.currentTimeMillis() > deadline) {
                    throw e;
                }
                emit("startup_retry", kv("cause", why));
            }
        }
    }

    static List<MessageView> receiveUntil(SimpleConsumer c, int n, Duration invisible) throws Exception {
        List<MessageView> out = new ArrayList<>();
        while (out.size() < n && System.currentTimeMillis() < deadline) {
            for (MessageView v : c.receive(n - out.size(), invisible)) {
                if (mine(c, v)) {
                    out.add(v);
                }
            }
        }
        return out;
    }

    static String handle(MessageView v) throws Exception {
        Method m = v.getClass().getMethod("getReceiptHandle");
        return (String) m.invoke(v);
    }

    /** A client exception message without its request id (which differs from run to run). */
    static String strip(String message) {
        return message == null ? "null" : message.replaceAll("request-id=[^,\\]]*", "request-id=*");
    }

    static Map<String, String> view(MessageView v) {
        Map<String, String> o = kv("id", v.getMessageId().toString(), "body", text(v),
            "tag", v.getTag().orElse(""), "keys", String.join(" ", new TreeMap<>(toMap(v.getKeys())).keySet()),
            "props", new TreeMap<>(v.getProperties()).toString(),
            "group", v.getMessageGroup().orElse(""),
            "attempt", String.valueOf(v.getDeliveryAttempt()),
            "delivery_ts", v.getDeliveryTimestamp().map(String::valueOf).orElse(""));
        return o;
    }

    static Map<String, String> toMap(java.util.Collection<String> items) {
        Map<String, String> m = new TreeMap<>();
        for (String s : items) {
            m.put(s, s);
        }
        return m;
    }

    static String raw(MessageView v) {
        ByteBuffer b = v.getBody().duplicate();
        byte[] raw = new byte[b.remaining()];
        b.get(raw);
        return new String(raw, StandardCharsets.UTF_8);
    }

    static String text(MessageView v) {
        String s = raw(v);
        return s.startsWith(NONCE) ? s.substring(NONCE.length()) : s;
    }

    static byte[] bytes(String s) {
        return (NONCE + s).getBytes(StandardCharsets.UTF_8);
    }

    /** Whether a received message is this run's (others are acked and left out). */
    static boolean mine(SimpleConsumer c, MessageView v) throws Exception {
        if (raw(v).startsWith(NONCE)) {
            return true;
        }
        c.ack(v);
        return false;
    }

    static Map<String, String> kv(String... pairs) {
        Map<String, String> m = new TreeMap<>();
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            m.put(pairs[i], pairs[i + 1]);
        }
        return m;
    }

    static synchronized void emit(String event, Map<String, String> fields) {
        StringBuilder sb = new StringBuilder("{\"event\":").append(quote(event));
        for (Map.Entry<String, String> e : fields.entrySet()) {
            sb.append(',').append(quote(e.getKey())).append(':').append(quote(e.getValue()));
        }
        System.out.println(sb.append('}'));
        System.out.flush();
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
