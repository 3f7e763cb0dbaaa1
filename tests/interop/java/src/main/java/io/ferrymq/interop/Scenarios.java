package io.ferrymq.interop;

import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/** The scenarios: each drives one everyday use of the client and returns what the user saw. */
final class Scenarios {
    private Scenarios() {
    }

    static String clientVersion() {
        return MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION);
    }

    static Object run(String name, Scenario s) throws Exception {
        switch (name) {
            case "send": return send(s);
            case "produce": return produce(s);
            case "consume": return consume(s);
            case "sql92": return sql92(s);
            case "orderly": return orderly(s);
            case "transaction": return transaction(s);
            case "retry_dlq": return retryDlq(s);
            case "delay": return delay(s);
            case "request_reply": return requestReply(s);
            case "query": return query(s);
            case "lite_pull": return litePull(s);
            case "broadcast": return broadcast(s);
            case "rebalance": return rebalance(s);
            case "acl": return acl(s);
            case "tls": return tls(s);
            case "namespace": return namespace(s);
            case "trace": return trace(s);
            case "bad_input": return badInput(s);
            default: throw new IllegalArgumentException("unknown scenario " + name);
        }
    }

    // --- helpers ------------------------------------------------------------------------------
    static final Comparator<MessageQueue> BY_QUEUE =
        Comparator.comparing(MessageQueue::getBrokerName).thenComparingInt(MessageQueue::getQueueId);

    static DefaultMQProducer producer(Scenario s, String group) throws Exception {
        DefaultMQProducer p = s.configure(new DefaultMQProducer(group));
        p.start();
        return p;
    }

    static DefaultMQPushConsumer pushConsumer(Scenario s, String group) {
        DefaultMQPushConsumer c = s.configure(new DefaultMQPushConsumer(group));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return c;
    }

    static Message msg(String topic, String tag, String key, String body) {
        Message m = new Message(topic, tag, key, body.getBytes(StandardCharsets.UTF_8));
        return m;
    }

    static String body(Message m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    static List<MessageQueue> queues(DefaultMQProducer p, String topic) throws Exception {
        List<MessageQueue> mqs = new ArrayList<>(retried(() -> p.fetchPublishMessageQueues(topic)));
        mqs.sort(BY_QUEUE);
        return mqs;
    }

    interface Call<T> {
        T call() throws Exception;
    }

    /** A route lookup, retried for up to 30 s: a cold JVM on a loaded 2-core machine can miss the
     * client's 3 s NameServer channel lock ("connect to null") on its first request. Not used
     * where the failure itself is observed (bad input). */
    static <T> T retried(Call<T> call) throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            try {
                return call.call();
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(500);
            }
        }
    }

    static boolean await(CountDownLatch latch, Scenario s) throws InterruptedException {
        return latch.await(s.timeoutMs(), TimeUnit.MILLISECONDS);
    }

    /** Every message of ``topic`` by pulling each queue from its first offset, once the queues
     * hold ``expected`` messages in all (or the timeout passes: then what is there). */
    static List<Map<String, Object>> readBack(Scenario s, String topic, int expected, String expr)
        throws Exception {
        DefaultMQPullConsumer c = s.configure(new DefaultMQPullConsumer("READER_" + System.nanoTime()));
        c.start();
        try {
            List<MessageQueue> mqs = new ArrayList<>(retried(() -> c.fetchSubscribeMessageQueues(topic)));
            mqs.sort(BY_QUEUE);
            long deadline = System.currentTimeMillis() + s.timeoutMs();
            while (System.currentTimeMillis() < deadline) {
                long total = 0;
                for (MessageQueue mq : mqs) {
                    total += c.maxOffset(mq) - c.minOffset(mq);
                }
                if (total >= expected) {
                    break;
                }
                Thread.sleep(100);
            }
            List<MessageExt> all = new ArrayList<>();
            for (MessageQueue mq : mqs) {
                long offset = c.minOffset(mq);
                while (true) {
                    PullResult r = expr.startsWith("SQL:")
                        ? c.pull(mq, MessageSelector.bySql(expr.substring(4)), offset, 32)
                        : c.pull(mq, expr, offset, 32);
                    if (r.getPullStatus() == PullStatus.FOUND) {
                        all.addAll(r.getMsgFoundList());
                    }
                    if (r.getPullStatus() == PullStatus.NO_NEW_MSG || r.getNextBeginOffset() <= offset) {
                        break;
                    }
                    offset = r.getNextBeginOffset();
                    if (offset >= c.maxOffset(mq)) {
                        break;
                    }
                }
            }
            return Obs.messages(all);
        } finally {
            c.shutdown();
        }
    }

    static List<Map<String, Object>> readBack(Scenario s, String topic, int expected) throws Exception {
        return readBack(s, topic, expected, "*");
    }

    /** Push-consume ``expected`` messages of ``topic`` with ``group`` (concurrently, ack all);
     * everything that came until the consumer stopped. ``finish_at_shutdown``: every consumption
     * returns only once the consumer is being stopped, so the offsets reach the broker by the
     * shutdown's own persist (4.x: a oneway UPDATE_CONSUMER_OFFSET, then UNREGISTER_CLIENT),
     * not by a pull's piggybacked commit or the 5 s persist (for fewer messages than the 20
     * consume threads). */
    static List<MessageExt> pushAll(Scenario s, String group, String topic, String expr, int expected)
        throws Exception {
        return pushAll(s, pushConsumer(s, group), topic, expr, expected);
    }

    /** The same with a consumer set up by the caller (RPC hook, TLS). */
    static List<MessageExt> pushAll(Scenario s, DefaultMQPushConsumer c, String topic, String expr,
        int expected) throws Exception {
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        CountDownLatch latch = new CountDownLatch(expected);
        CountDownLatch stopping = new CountDownLatch(1);
        boolean finishAtShutdown = s.bool("finish_at_shutdown", false);
        // the shutdown waits for consumptions in progress: with the default 0 it interrupts them,
        // and one interrupted before ProcessQueue.removeMessage never moves its queue's offset,
        // so the offsets persisted at shutdown miss messages the listener already saw
        c.setAwaitTerminationMillisWhenShutdown(s.timeoutMs());
        c.subscribe(topic, expr);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            got.addAll(msgs);
            msgs.forEach(m -> latch.countDown());
            if (finishAtShutdown) {
                try {
                    await(stopping, s);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            await(latch, s);
        } finally {
            stopping.countDown();
            c.shutdown();
        }
        return got;
    }

    // --- scenarios ----------------------------------------------------------------------------
    /** sync / async / oneway / batch sends with tags, keys and user properties, queue chosen
     * round robin; the send results, then every stored message. */
    static Object send(Scenario s) throws Exception {
        String topic = s.str("topic");
        String mode = s.str("mode");
        int count = s.integer("count", 4);
        DefaultMQProducer p = producer(s, s.str("group"));
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            List<MessageQueue> mqs = queues(p, topic);
            List<Message> msgs = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                Message m = msg(topic, "Tag" + (i % 2), "key-" + i + " shared", mode + "-" + i);
                m.putUserProperty("seq", String.valueOf(i));
                m.putUserProperty("mode", mode);
                msgs.add(m);
            }
            List<Object> results = new ArrayList<>(Collections.nCopies(count, null));
            switch (mode) {
                case "sync":
                    for (int i = 0; i < count; i++) {
                        results.set(i, Obs.send(p.send(msgs.get(i), mqs.get(i % mqs.size()))));
                    }
                    break;
                case "async":
                    for (int i = 0; i < count; i++) {
                        // one at a time: the queue offsets are then part of the contract
                        final int n = i;
                        CountDownLatch done = new CountDownLatch(1);
                        p.send(msgs.get(i), mqs.get(i % mqs.size()), new SendCallback() {
                            public void onSuccess(SendResult r) {
                                results.set(n, Obs.send(r));
                                done.countDown();
                            }

                            public void onException(Throwable e) {
                                results.set(n, Obs.error(e));
                                done.countDown();
                            }
                        });
                        await(done, s);
                    }
                    break;
                case "oneway":
                    for (int i = 0; i < count; i++) {
                        p.sendOneway(msgs.get(i), mqs.get(i % mqs.size()));
                    }
                    break;
                case "batch":
                    results.clear();
                    results.add(Obs.send(p.send(msgs, mqs.get(0))));
                    break;
                default:
                    throw new IllegalArgumentException("mode " + mode);
            }
            out.put("sent", results);
        } finally {
            p.shutdown();
        }
        out.put("stored", readBack(s, topic, count));
        return out;
    }

    /** ``count`` plain messages "<prefix>-i" round robin over the queues; the send results. */
    static Object produce(Scenario s) throws Exception {
        String topic = s.str("topic");
        DefaultMQProducer p = producer(s, s.str("group"));
        try {
            List<MessageQueue> mqs = queues(p, topic);
            List<Object> results = new ArrayList<>();
            for (int i = 0; i < s.integer("count", 4); i++) {
                Message m = msg(topic, s.str("tag", "TagA"), null, s.str("prefix", "m") + "-" + i);
                results.add(Obs.send(p.send(m, mqs.get(i % mqs.size()))));
            }
            return results;
        } finally {
            p.shutdown();
        }
    }

    /** Push-consume until ``expected`` messages came; the bodies, sorted. */
    static Object consume(Scenario s) throws Exception {
        List<MessageExt> got = pushAll(s, s.str("group"), s.str("topic"), s.str("expr", "*"),
            s.integer("expected", 1));
        List<String> bodies = new ArrayList<>();
        got.forEach(m -> bodies.add(body(m)));
        Collections.sort(bodies);
        return bodies;
    }

    /** SQL92 filtering by pull and by push, and a SQL expression that does not parse. */
    static Object sql92(Scenario s) throws Exception {
        String topic = s.str("topic");
        String sql = "a >= 5 AND b = 'x'";
        DefaultMQProducer p = producer(s, s.str("group") + "_P");
        try {
            List<MessageQueue> mqs = queues(p, topic);
            for (int i = 0; i < 10; i++) {
                Message m = msg(topic, "TagA", null, "sql-" + i);
                m.putUserProperty("a", String.valueOf(i));
                m.putUserProperty("b", i % 2 == 0 ? "x" : "y");
                p.send(m, mqs.get(i % mqs.size()));
            }
        } finally {
            p.shutdown();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        List<String> bodies = new ArrayList<>();
        {
            List<MessageExt> got = new CopyOnWriteArrayList<>();
            CountDownLatch latch = new CountDownLatch(3);
            DefaultMQPushConsumer c = pushConsumer(s, s.str("group") + "_SQL");
            c.subscribe(topic, MessageSelector.bySql(sql));
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                got.addAll(msgs);
                msgs.forEach(m -> latch.countDown());
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            try {
                await(latch, s);
            } finally {
                c.shutdown();
            }
            got.forEach(m -> bodies.add(body(m)));
            Collections.sort(bodies);
        }
        out.put("pushed", bodies);
        DefaultMQPushConsumer bad = pushConsumer(s, s.str("group") + "_BAD");
        try {
            bad.subscribe(topic, MessageSelector.bySql("a >>> 1"));
            bad.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) ->
                ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
            bad.start();
            out.put("badSql", "started");
        } catch (Exception e) {
            out.put("badSql", Obs.error(e));
        } finally {
            bad.shutdown();
        }
        return out;
    }

    /** Orderly: messages of one order id go to one queue and are consumed in order under the
     * queue lock; per queue, the bodies in consumption order. */
    static Object orderly(Scenario s) throws Exception {
        String topic = s.str("topic");
        int count = s.integer("count", 12);
        DefaultMQProducer p = producer(s, s.str("group") + "_P");
        List<Object> sent = new ArrayList<>();
        try {
            for (int i = 0; i < count; i++) {
                int order = i % 3;
                Message m = msg(topic, "TagA", "order-" + order, "order" + order + "-step" + (i / 3));
                SendResult r = p.send(m, (mqs, msg, arg) -> {
                    List<MessageQueue> sorted = new ArrayList<>(mqs);
                    sorted.sort(BY_QUEUE);
                    return sorted.get((Integer) arg % sorted.size());
                }, order);
                sent.add(Obs.send(r));
            }
        } finally {
            p.shutdown();
        }
        Map<Integer, List<String>> perQueue = new ConcurrentHashMap<>();
        CountDownLatch latch = new CountDownLatch(count);
        DefaultMQPushConsumer c = pushConsumer(s, s.str("group"));
        c.subscribe(topic, "*");
        AtomicInteger suspended = new AtomicInteger();
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                // the first message of the first order is refused once: orderly consumption
                // suspends the queue and redelivers the same message, keeping the order
                if (body(m).equals("order0-step0") && suspended.getAndIncrement() == 0) {
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                }
            }
            for (MessageExt m : msgs) {
                perQueue.computeIfAbsent(m.getQueueId(), k -> new CopyOnWriteArrayList<>()).add(body(m));
                latch.countDown();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        try {
            await(latch, s);
        } finally {
            c.shutdown();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("sent", sent);
        out.put("perQueue", new TreeMap<>(perQueue));
        out.put("suspendedOnce", suspended.get() >= 1);
        return out;
    }

    /** Half messages: commit, rollback, and unknown resolved by the broker's check-back. */
    static Object transaction(Scenario s) throws Exception {
        String topic = s.str("topic");
        Map<String, Integer> checks = new ConcurrentHashMap<>();
        List<Object> checked = new CopyOnWriteArrayList<>();
        CountDownLatch checkedLatch = new CountDownLatch(1);
        TransactionMQProducer p = s.configure(new TransactionMQProducer(s.str("group")));
        // the whole send (route lookup, first connection) within 3 s failed once against Apache
        // as the session's first scenario at load average 30 ("sendDefaultImpl call timeout")
        p.setSendMsgTimeout(10_000);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String b = body(msg);
                if (b.startsWith("commit")) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }
                if (b.startsWith("rollback")) {
                    return LocalTransactionState.ROLLBACK_MESSAGE;
                }
                return LocalTransactionState.UNKNOW;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                // a check can also reach a committed or rolled back half message whose op
                // message the broker has not read yet: answer UNKNOW there, as an application
                // that looks its transaction up would not commit twice
                if (!body(msg).startsWith("unknown")) {
                    return LocalTransactionState.UNKNOW;
                }
                if (checks.merge(body(msg), 1, Integer::sum) == 1) {
                    checked.add(Obs.message(msg));
                }
                checkedLatch.countDown();
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            // the broker asks only producers it knows (heartbeat): the client's first heartbeat,
            // 1 s after start, reaches no broker while the route is unknown, the next comes 30 s
            // later, and with transactionCheckInterval=1000 Apache gives up a half message after
            // transactionCheckMax (15) checks in ~15 s (seen at load average 60): introduce the
            // producer to the broker first, as its first heartbeat does when the route is known
            // (the client's own route table: fetchPublishMessageQueues does not fill it)
            MQClientInstance client = p.getDefaultMQProducerImpl().getMqClientFactory();
            retried(() -> {
                if (!client.updateTopicRouteInfoFromNameServer(topic)) {
                    throw new IllegalStateException("no route of " + topic + " yet");
                }
                return null;
            });
            client.sendHeartbeatToAllBrokerWithLock();
            List<Object> sent = new ArrayList<>();
            for (String b : new String[] {"commit-1", "rollback-1", "unknown-1"}) {
                TransactionSendResult r = p.sendMessageInTransaction(msg(topic, "TagT", b, b), null);
                Map<String, Object> o = Obs.send(r);
                o.put("localTransactionState", String.valueOf(r.getLocalTransactionState()));
                sent.add(o);
            }
            out.put("sent", sent);
            out.put("checkedBack", await(checkedLatch, s));
            out.put("checkedMessage", checked.isEmpty() ? null : checked.get(0));
            out.put("stored", readBack(s, topic, 2));
        } finally {
            p.shutdown();
        }
        return out;
    }

    /** A message that always fails: redelivered with its reconsume count, then in %DLQ%group,
     * which a pull consumer reads. */
    static Object retryDlq(Scenario s) throws Exception {
        String topic = s.str("topic");
        String group = s.str("group");
        DefaultMQProducer p = producer(s, group + "_P");
        try {
            Message m = msg(topic, "TagR", "retry-key", "always-fails");
            m.putUserProperty("origin", "retry");
            p.send(m, queues(p, topic).get(0));
        } finally {
            p.shutdown();
        }
        List<MessageExt> deliveries = new CopyOnWriteArrayList<>();
        CountDownLatch latch = new CountDownLatch(2);
        DefaultMQPushConsumer c = pushConsumer(s, group);
        c.setMaxReconsumeTimes(1);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            deliveries.addAll(msgs);
            msgs.forEach(x -> latch.countDown());
            ctx.setDelayLevelWhenNextConsume(1);  // retry after 1 s, not the default 10 s
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        c.start();
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            await(latch, s);
            // read the DLQ while the consumer runs: its last send-back may still be in flight
            try {
                out.put("dlq", readBack(s, "%DLQ%" + group, 1));
            } catch (Exception e) {
                out.put("dlq", Obs.error(e));
            }
        } finally {
            c.shutdown();
        }
        out.put("deliveries", Obs.sorted(deliveries));
        return out;
    }

    /** A message with delay level 1 (1 s): what the consumer gets. */
    static Object delay(Scenario s) throws Exception {
        String topic = s.str("topic");
        DefaultMQProducer p = producer(s, s.str("group") + "_P");
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            Message m = msg(topic, "TagD", "delay-key", "delayed");
            m.setDelayTimeLevel(1);
            out.put("sent", Obs.send(p.send(m, queues(p, topic).get(0))));
        } finally {
            p.shutdown();
        }
        out.put("received", Obs.sorted(pushAll(s, s.str("group"), topic, "*", 1)));
        return out;
    }

    /** producer.request(): a responder replies with MessageUtil.createReplyMessage. */
    static Object requestReply(Scenario s) throws Exception {
        String topic = s.str("topic");
        String group = s.str("group");
        List<Object> seen = new CopyOnWriteArrayList<>();
        CountDownLatch replied = new CountDownLatch(1);
        DefaultMQProducer replier = producer(s, group + "_REPLIER");
        DefaultMQPushConsumer responder = pushConsumer(s, group);
        responder.subscribe(topic, "*");
        responder.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                seen.add(Obs.message(m));
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("reply-to-" + body(m)).getBytes(StandardCharsets.UTF_8));
                    seen.add(Obs.send(replier.send(reply)));
                } catch (Exception e) {
                    seen.add(Obs.error(e));
                }
                replied.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        responder.start();
        DefaultMQProducer requester = producer(s, group + "_REQ");
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            Message req = msg(topic, "TagQ", "req-key", "question");
            try {
                Message reply = requester.request(req, s.timeoutMs());
                out.put("reply", Obs.message(reply));
            } catch (Exception e) {
                out.put("reply", Obs.error(e));
            }
            await(replied, s);
        } finally {
            requester.shutdown();
            responder.shutdown();
            replier.shutdown();
        }
        out.put("requestSeenByResponder", seen);
        return out;
    }

    /** Query by key (the index) and view by offset id and by unique id. */
    @SuppressWarnings("deprecation")
    static Object query(Scenario s) throws Exception {
        String topic = s.str("topic");
        String key = s.str("key");
        DefaultMQProducer p = producer(s, s.str("group"));
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            List<MessageQueue> mqs = queues(p, topic);
            List<SendResult> sent = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                sent.add(p.send(msg(topic, "TagK", key, "query-" + i), mqs.get(i % mqs.size())));
            }
            List<MessageExt> found = new ArrayList<>();
            long deadline = System.currentTimeMillis() + s.timeoutMs();
            while (System.currentTimeMillis() < deadline) {
                QueryResult r = p.queryMessage(topic, key, 32, 0, Long.MAX_VALUE);
                found = r.getMessageList();
                if (found.size() >= 3) {
                    break;
                }
                Thread.sleep(200);
            }
            out.put("byKey", Obs.sorted(found));
            out.put("byOffsetMsgId", Obs.message(p.viewMessage(topic, sent.get(1).getOffsetMsgId())));
            out.put("byUniqueId", Obs.message(p.viewMessage(topic, sent.get(2).getMsgId())));
            try {
                out.put("unknownKey", p.queryMessage(topic, "no-such-key", 32, 0, Long.MAX_VALUE)
                    .getMessageList().size());
            } catch (Exception e) {
                out.put("unknownKey", Obs.error(e));
            }
        } finally {
            p.shutdown();
        }
        return out;
    }

    /** Lite pull: subscribe (rebalanced), and assign + seek. */
    static Object litePull(Scenario s) throws Exception {
        String topic = s.str("topic");
        int count = s.integer("count", 8);
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultLitePullConsumer sub = s.configure(new DefaultLitePullConsumer(s.str("group") + "_SUB"));
        sub.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        sub.subscribe(topic, "*");
        sub.start();
        try {
            out.put("subscribed", Obs.sorted(poll(sub, count, s)));
        } finally {
            sub.shutdown();
        }
        DefaultLitePullConsumer asg = s.configure(new DefaultLitePullConsumer(s.str("group") + "_ASSIGN"));
        asg.setAutoCommit(false);
        asg.start();
        try {
            List<MessageQueue> mqs = new ArrayList<>(asg.fetchMessageQueues(topic));
            mqs.sort(BY_QUEUE);
            asg.assign(mqs);
            for (MessageQueue mq : mqs) {
                asg.seek(mq, mq.getQueueId() == 0 ? 1 : 0);
            }
            out.put("assignedSeek", Obs.sorted(poll(asg, count - 1, s)));
        } finally {
            asg.shutdown();
        }
        return out;
    }

    static List<MessageExt> poll(DefaultLitePullConsumer c, int expected, Scenario s) {
        List<MessageExt> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + s.timeoutMs();
        while (got.size() < expected && System.currentTimeMillis() < deadline) {
            got.addAll(c.poll(1000));
        }
        return got;
    }

    /** Broadcasting: two consumers of one group each get every message. */
    static Object broadcast(Scenario s) throws Exception {
        String topic = s.str("topic");
        int count = s.integer("count", 4);
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        List<List<String>> got = new ArrayList<>();
        CountDownLatch latch = new CountDownLatch(2 * count);
        for (int i = 0; i < 2; i++) {
            DefaultMQPushConsumer c = pushConsumer(s, s.str("group"));
            setMessageModel(c, "BROADCASTING");
            c.subscribe(topic, "*");
            List<String> mine = new CopyOnWriteArrayList<>();
            got.add(mine);
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                msgs.forEach(m -> {
                    mine.add(body(m));
                    latch.countDown();
                });
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            consumers.add(c);
        }
        try {
            DefaultMQProducer p = producer(s, s.str("group") + "_P");
            try {
                List<MessageQueue> mqs = queues(p, topic);
                for (int i = 0; i < count; i++) {
                    p.send(msg(topic, "TagB", null, "bc-" + i), mqs.get(i % mqs.size()));
                }
            } finally {
                p.shutdown();
            }
            await(latch, s);
        } finally {
            consumers.forEach(DefaultMQPushConsumer::shutdown);
        }
        List<List<String>> out = new ArrayList<>();
        for (List<String> mine : got) {
            List<String> sorted = new ArrayList<>(mine);
            Collections.sort(sorted);
            out.add(sorted);
        }
        return out;
    }

    /** The queues a push consumer holds now (its rebalance's allocation), ids sorted. */
    static List<Integer> held(DefaultMQPushConsumer c, String topic) {
        List<Integer> ids = new ArrayList<>();
        for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (mq.getTopic().equals(topic)) {
                ids.add(mq.getQueueId());
            }
        }
        Collections.sort(ids);
        return ids;
    }

    /** Waits until ``done`` holds or the scenario's timeout passes; whether it held. */
    static boolean until(Scenario s, Call<Boolean> done) throws Exception {
        long deadline = System.currentTimeMillis() + s.timeoutMs();
        while (!done.call()) {
            if (System.currentTimeMillis() > deadline) {
                return false;
            }
            Thread.sleep(100);
        }
        return true;
    }

    /** The group's consumers as the client asks the broker (GET_CONSUMER_LIST_BY_GROUP), each
     * named by which of ``ours`` it is ("other" for a stranger), sorted. */
    static List<String> consumerIds(DefaultMQPushConsumer c, String topic, String group,
        List<String> ours) {
        List<String> ids = c.getDefaultMQPushConsumerImpl().getmQClientFactory().findConsumerIdList(topic, group);
        List<String> out = new ArrayList<>();
        if (ids != null) {
            for (String id : ids) {
                int i = ours.indexOf(id);
                out.add(i < 0 ? "other" : "consumer-" + i);
            }
        }
        Collections.sort(out);  // the broker keeps them in a hash map
        return out;
    }

    /**
     * Two push consumers of one group join (AllocateMessageQueueAveragely, the default), each
     * gets its share; then the one that sorts last leaves and the other takes every queue and
     * consumes what was produced meanwhile. Consumers are named by the sorted order of their
     * client ids (the order the allocation uses), so runs against two brokers compare.
     */
    static Object rebalance(Scenario s) throws Exception {
        String topic = s.str("topic");
        String group = s.str("group");
        int count = s.integer("count", 8);
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        Map<DefaultMQPushConsumer, List<String>> got = new LinkedHashMap<>();
        AtomicInteger consumed = new AtomicInteger();
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQProducer p = producer(s, group + "_P");
        try {
            List<MessageQueue> mqs = queues(p, topic);
            for (int i = 0; i < 2; i++) {
                DefaultMQPushConsumer c = pushConsumer(s, group);
                c.subscribe(topic, "*");
                List<String> mine = new CopyOnWriteArrayList<>();
                got.put(c, mine);
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    msgs.forEach(m -> mine.add(body(m)));
                    consumed.addAndGet(msgs.size());
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                consumers.add(c);
            }
            consumers.sort(Comparator.comparing(c -> c.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId()));
            List<String> ids = new ArrayList<>();
            consumers.forEach(c -> ids.add(c.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId()));
            DefaultMQPushConsumer first = consumers.get(0);
            DefaultMQPushConsumer second = consumers.get(1);
            // settled: both hold queues and together every queue exactly once
            boolean settled = until(s, () -> {
                List<Integer> all = new ArrayList<>(held(first, topic));
                all.addAll(held(second, topic));
                Collections.sort(all);
                return !held(first, topic).isEmpty() && !held(second, topic).isEmpty()
                    && all.equals(List.of(0, 1, 2, 3).subList(0, mqs.size()));
            });
            out.put("joinedSettled", settled);
            out.put("joinedAllocation", List.of(held(first, topic), held(second, topic)));
            out.put("joinedConsumers", consumerIds(first, topic, group, ids));
            for (int i = 0; i < count; i++) {
                p.send(msg(topic, "TagR", null, "early-" + i), mqs.get(i % mqs.size()));
            }
            out.put("earlyConsumed", until(s, () -> consumed.get() >= count));
            List<List<String>> early = new ArrayList<>();
            for (DefaultMQPushConsumer c : consumers) {
                List<String> sorted = new ArrayList<>(got.get(c));
                Collections.sort(sorted);
                early.add(sorted);
            }
            out.put("early", early);
            second.shutdown();
            consumers.remove(second);
            int before = got.get(first).size();
            for (int i = 0; i < count; i++) {
                p.send(msg(topic, "TagR", null, "late-" + i), mqs.get(i % mqs.size()));
            }
            out.put("leftSettled", until(s, () -> held(first, topic).size() == mqs.size()
                && consumerIds(first, topic, group, ids).size() == 1));
            out.put("leftAllocation", held(first, topic));
            out.put("leftConsumers", consumerIds(first, topic, group, ids));
            out.put("lateConsumed", until(s, () -> got.get(first).stream().filter(b -> b.startsWith("late-")).count() >= count));
            List<String> after = new ArrayList<>(got.get(first).subList(before, got.get(first).size()));
            Collections.sort(after);
            // everything the survivor got once it was alone: the late messages, and any early one
            // it got again (a duplicate)
            out.put("survivorAfterLeave", after);
        } finally {
            consumers.forEach(DefaultMQPushConsumer::shutdown);
            p.shutdown();
        }
        return out;
    }

    /** One send to queue 0 of ``topic`` (no retry) by ``p``, started here and shut down: its
     * result, or the error the user gets. */
    static Object sendOnce(DefaultMQProducer p, String topic, String body) {
        p.setRetryTimesWhenSendFailed(0);
        try {
            p.start();
            // queue 0: without a selector the client starts at a random queue
            return Obs.send(p.send(msg(topic, "TagSec", null, body), queues(p, topic).get(0)));
        } catch (Exception e) {
            return Obs.error(e);
        } finally {
            p.shutdown();
        }
    }

    static AclClientRPCHook hook(Scenario s, String secret) {
        return new AclClientRPCHook(new SessionCredentials(s.str("access_key"), secret));
    }

    /** The bodies ``c`` push-consumes from ``topic`` until one came. */
    static List<String> consumeOne(Scenario s, DefaultMQPushConsumer c, String topic) throws Exception {
        List<String> bodies = new ArrayList<>();
        pushAll(s, c, topic, "*", 1).forEach(m -> bodies.add(body(m)));
        return bodies;
    }

    /** Signed clients (AclClientRPCHook) at a broker with ACL: an allowed send and its push
     * consumption, then a wrong secret and a denied topic. */
    static Object acl(Scenario s) throws Exception {
        String topic = s.str("topic");
        String secret = s.str("secret_key");
        String producerGroup = s.str("group") + "_P";
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("allowedSend", sendOnce(s.configure(new DefaultMQProducer(producerGroup, hook(s, secret))),
            topic, "acl-ok"));
        DefaultMQPushConsumer c = s.configure(
            new DefaultMQPushConsumer(s.str("group"), hook(s, secret), new AllocateMessageQueueAveragely()));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        out.put("consumed", consumeOne(s, c, topic));
        out.put("wrongSecret", sendOnce(
            s.configure(new DefaultMQProducer(producerGroup, hook(s, secret + "-wrong"))), topic, "acl-bad-secret"));
        out.put("deniedTopic", sendOnce(
            s.configure(new DefaultMQProducer(producerGroup, hook(s, secret))), s.str("denied_topic"), "acl-denied"));
        return out;
    }

    /** A producer over TLS or in plain text. */
    static DefaultMQProducer tlsProducer(Scenario s, boolean useTls) {
        DefaultMQProducer p = s.configure(new DefaultMQProducer(s.str("group") + "_P"));
        p.setUseTLS(useTls);
        // a plain client at an enforcing broker waits out its timeout: keep that one short
        p.setSendMsgTimeout(useTls ? 10_000 : 1500);
        return p;
    }

    /** Clients with useTLS at a broker that enforces TLS (its NameServer permissive): a send and
     * its push consumption; then a plain client's send. */
    static Object tls(Scenario s) throws Exception {
        String topic = s.str("topic");
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("tlsSend", sendOnce(tlsProducer(s, true), topic, "tls-ok"));
        DefaultMQPushConsumer c = pushConsumer(s, s.str("group"));
        c.setUseTLS(true);
        out.put("consumed", consumeOne(s, c, topic));
        out.put("plainSend", sendOnce(tlsProducer(s, false), topic, "plain"));
        return out;
    }

    /** MessageModel moved packages between 4.x and 5.x: set it by name. */
    static void setMessageModel(DefaultMQPushConsumer c, String model) throws Exception {
        for (Method m : DefaultMQPushConsumer.class.getMethods()) {
            if (m.getName().equals("setMessageModel")) {
                @SuppressWarnings({"unchecked", "rawtypes"})
                Object value = Enum.valueOf((Class<Enum>) m.getParameterTypes()[0], model);
                m.invoke(c, value);
                return;
            }
        }
        throw new IllegalStateException("no setMessageModel");
    }

    /** A namespaced producer and consumer; what each sees, and the stored topic name. */
    @SuppressWarnings("deprecation")
    static Object namespace(Scenario s) throws Exception {
        String ns = s.str("namespace");
        String topic = s.str("topic");
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQProducer p = s.configure(new DefaultMQProducer(s.str("group") + "_P"));
        p.setNamespace(ns);
        p.start();
        try {
            out.put("sent", Obs.send(p.send(msg(topic, "TagN", "ns-key", "namespaced"))));
        } finally {
            p.shutdown();
        }
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        CountDownLatch latch = new CountDownLatch(1);
        DefaultMQPushConsumer c = pushConsumer(s, s.str("group"));
        c.setNamespace(ns);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            got.addAll(msgs);
            msgs.forEach(m -> latch.countDown());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            await(latch, s);
        } finally {
            c.shutdown();
        }
        out.put("received", Obs.sorted(got));
        return out;
    }

    /** Client message trace: what lands in RMQ_SYS_TRACE_TOPIC for one send (the fields of the
     * Pub record that do not depend on time or hosts). */
    static Object trace(Scenario s) throws Exception {
        String topic = s.str("topic");
        DefaultMQProducer p = s.configure(new DefaultMQProducer(s.str("group"), true, null));
        p.start();
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            out.put("sent", Obs.send(p.send(msg(topic, "TagTr", "trace-key", "traced"))));
        } finally {
            p.shutdown();  // flushes the trace dispatcher
        }
        List<List<String>> records = new ArrayList<>();
        long deadline = System.currentTimeMillis() + s.timeoutMs();
        DefaultMQPullConsumer c = s.configure(new DefaultMQPullConsumer("TRACE_READER_" + System.nanoTime()));
        c.start();
        try {
            while (records.isEmpty() && System.currentTimeMillis() < deadline) {
                for (MessageQueue mq : c.fetchSubscribeMessageQueues("RMQ_SYS_TRACE_TOPIC")) {
                    PullResult r = c.pull(mq, "*", 0, 32);
                    if (r.getPullStatus() != PullStatus.FOUND) {
                        continue;
                    }
                    for (MessageExt m : r.getMsgFoundList()) {
                        for (String rec : body(m).split("\u0002")) {
                            String[] f = rec.split("\u0001", -1);
                            if (f.length > 7 && f[4].equals(topic)) {
                                // type, regionId, group, topic, tags, keys, bodyLength, msgType
                                records.add(List.of(f[0], f[2], f[3], f[4], f[6], f[7], f[9], f[11]));
                            }
                        }
                    }
                }
                if (records.isEmpty()) {
                    Thread.sleep(200);
                }
            }
        } catch (Exception e) {
            out.put("error", Obs.error(e));
        } finally {
            c.shutdown();
        }
        out.put("records", records);
        return out;
    }

    /** Bad input: an unknown topic, an oversized message, a read-only topic. */
    static Object badInput(Scenario s) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQPullConsumer c = s.configure(new DefaultMQPullConsumer("BAD_" + System.nanoTime()));
        c.start();
        try {
            c.fetchSubscribeMessageQueues(s.str("unknown_topic"));
            out.put("unknownTopicRoute", "found");
        } catch (Exception e) {
            out.put("unknownTopicRoute", Obs.error(e));
        } finally {
            c.shutdown();
        }
        DefaultMQProducer p = s.configure(new DefaultMQProducer(s.str("group")));
        p.setMaxMessageSize(16 * 1024 * 1024);  // let the broker judge, not the client
        p.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        try {
            byte[] big = new byte[4 * 1024 * 1024 + 1];
            new Random(7).nextBytes(big);
            try {
                out.put("oversized", Obs.send(p.send(new Message(s.str("topic"), big))));
            } catch (Exception e) {
                out.put("oversized", Obs.error(e));
            }
            try {
                out.put("readOnlyTopic", Obs.send(p.send(msg(s.str("read_only_topic"), "T", null, "x"))));
            } catch (Exception e) {
                out.put("readOnlyTopic", Obs.error(e));
            }
            try {
                List<MessageQueue> mqs = new ArrayList<>(p.fetchPublishMessageQueues(s.str("topic")));
                mqs.sort(BY_QUEUE);
                MessageQueue bogus = new MessageQueue(s.str("topic"), mqs.get(0).getBrokerName(), 99);
                out.put("queueOutOfRange", Obs.send(p.send(msg(s.str("topic"), "T", null, "x"), bogus)));
            } catch (Exception e) {
                out.put("queueOutOfRange", Obs.error(e));
            }
        } finally {
            p.shutdown();
        }
        return out;
    }
}
