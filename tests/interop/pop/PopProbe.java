// POP through the Java remoting client 5.4.0, run against Apache RocketMQ and ferrymq alike
// (java source-file mode: no build step). Prints one JSON object per line; the Python test
// compares what the two brokers gave.
//
//   PopProbe push <namesrv> <brokerAddr> <topic> <group> <count>
//     setMessageRequestMode(POP) by admin, then a DefaultMQPushConsumer with clientRebalance=false
//     consumes <count> messages; the listener fails "m1" once (RECONSUME_LATER: the client calls
//     CHANGE_MESSAGE_INVISIBLETIME with 10 s), so m1 comes back with reconsumeTimes 1.
//   PopProbe api <namesrv> <brokerAddr> <topic> <group> <count>
//     the calls the 5.x proxy makes: popMessageAsync, ackMessageAsync, changeInvisibleTimeAsync,
//     batchAckMessageAsync on MQClientAPIImpl.
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.*;
import org.apache.rocketmq.remoting.protocol.header.*;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class PopProbe {
    static void out(String kind, Map<String, Object> fields) {
        StringBuilder sb = new StringBuilder("{\"kind\":\"" + kind + "\"");
        for (Map.Entry<String, Object> e : fields.entrySet()) {
            Object v = e.getValue();
            sb.append(",\"").append(e.getKey()).append("\":");
            if (v instanceof Number || v instanceof Boolean) sb.append(v);
            else sb.append('"').append(String.valueOf(v).replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
        }
        System.out.println(sb.append('}'));
        System.out.flush();
    }

    static Map<String, Object> fields(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    static void prepare(String namesrv, String broker, String topic, String group, int count) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt("probe_admin");
        admin.setNamesrvAddr(namesrv);
        admin.start();
        TopicConfig tc = new TopicConfig(topic, 1, 1);
        admin.createAndUpdateTopicConfig(broker, tc);
        admin.setMessageRequestMode(broker, topic, group, MessageRequestMode.POP, 0, 5000);
        admin.shutdown();
        DefaultMQProducer producer = new DefaultMQProducer("probe_pg");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        for (int i = 0; i < count; i++) {
            Message msg = new Message(topic, "TagA", ("m" + i).getBytes(StandardCharsets.UTF_8));
            SendResult r = null;
            for (int attempt = 0; attempt < 30 && r == null; attempt++) {
                try { r = producer.send(msg); } catch (Exception e) { Thread.sleep(1000); }
            }
            out("sent", fields("body", "m" + i, "status", r == null ? "FAILED" : r.getSendStatus().name()));
        }
        producer.shutdown();
    }

    public static void main(String[] args) throws Exception {
        String scenario = args[0], namesrv = args[1], broker = args[2], topic = args[3], group = args[4];
        int count = Integer.parseInt(args[5]);
        prepare(namesrv, broker, topic, group, count);
        if (scenario.equals("push")) push(namesrv, topic, group, count);
        else api(namesrv, broker, topic, group, count);
        System.exit(0);
    }

    static void push(String namesrv, String topic, String group, int count) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setClientRebalance(false);
        consumer.setConsumeFromWhere(org.apache.rocketmq.common.consumer.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        Set<String> done = ConcurrentHashMap.newKeySet();
        CountDownLatch all = new CountDownLatch(count);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                boolean fail = body.equals("m1") && m.getReconsumeTimes() == 0;
                out("delivery", fields("body", body, "reconsumeTimes", m.getReconsumeTimes(),
                    "topic", m.getTopic(), "hasPopCk", m.getProperty(MessageConst.PROPERTY_POP_CK) != null,
                    "popCkFields", m.getProperty(MessageConst.PROPERTY_POP_CK) == null ? 0 : m.getProperty(MessageConst.PROPERTY_POP_CK).split(" ").length,
                    "failed", fail));
                if (fail) return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                if (done.add(body)) all.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean ok = all.await(90, TimeUnit.SECONDS);
        Thread.sleep(3000); // acks of the last deliveries reach the broker
        out("end", fields("allConsumed", ok, "consumed", done.size()));
        consumer.shutdown();
    }

    static void api(String namesrv, String broker, String topic, String group, int count) throws Exception {
        DefaultMQPullConsumer pc = new DefaultMQPullConsumer(group + "_api");
        pc.setNamesrvAddr(namesrv);
        pc.start();
        MQClientInstance instance = pc.getDefaultMQPullConsumerImpl().getRebalanceImpl().getmQClientFactory();
        MQClientAPIImpl api = instance.getMQClientAPIImpl();
        String brokerName = "broker-a";
        List<MessageExt> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30000;
        while (got.size() < count && System.currentTimeMillis() < deadline) {
            PopMessageRequestHeader h = new PopMessageRequestHeader();
            h.setConsumerGroup(group); h.setTopic(topic); h.setQueueId(-1); h.setMaxMsgNums(32);
            h.setInvisibleTime(20000); h.setPollTime(2000); h.setBornTime(System.currentTimeMillis());
            h.setInitMode(0); h.setExpType("TAG"); h.setExp("*");
            CompletableFuture<PopResult> f = new CompletableFuture<>();
            api.popMessageAsync(brokerName, broker, h, 10000, new PopCallback() {
                public void onSuccess(PopResult r) { f.complete(r); }
                public void onException(Throwable e) { f.completeExceptionally(e); }
            });
            PopResult r = f.get(15, TimeUnit.SECONDS);
            out("pop", fields("status", r.getPopStatus().name(), "n", r.getMsgFoundList() == null ? 0 : r.getMsgFoundList().size()));
            if (r.getMsgFoundList() != null) got.addAll(r.getMsgFoundList());
        }
        for (MessageExt m : got) {
            String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
            out("popped", fields("body", new String(m.getBody(), StandardCharsets.UTF_8), "ckFields", ck.split(" ").length,
                "reviveQid", ck.split(" ")[3], "topicType", ck.split(" ")[4], "queueOffset", m.getQueueOffset(),
                "ckQueueOffset", ck.split(" ")[7], "invisible", ck.split(" ")[2], "firstPop", m.getProperty("1ST_POP_TIME") != null));
        }
        // ack the first, change the second's invisible time, batch-ack the rest
        MessageExt first = got.get(0);
        AckMessageRequestHeader ah = new AckMessageRequestHeader();
        String ck0 = first.getProperty(MessageConst.PROPERTY_POP_CK);
        ah.setConsumerGroup(group); ah.setTopic(topic); ah.setQueueId(first.getQueueId());
        ah.setExtraInfo(ck0); ah.setOffset(first.getQueueOffset());
        CompletableFuture<AckResult> af = new CompletableFuture<>();
        api.ackMessageAsync(broker, 5000, new AckCallback() {
            public void onSuccess(AckResult r) { af.complete(r); }
            public void onException(Throwable e) { af.completeExceptionally(e); }
        }, ah);
        out("ack", fields("status", af.get(10, TimeUnit.SECONDS).getStatus().name()));

        MessageExt second = got.get(1);
        ChangeInvisibleTimeRequestHeader ch = new ChangeInvisibleTimeRequestHeader();
        ch.setConsumerGroup(group); ch.setTopic(topic); ch.setQueueId(second.getQueueId());
        ch.setExtraInfo(second.getProperty(MessageConst.PROPERTY_POP_CK)); ch.setOffset(second.getQueueOffset());
        ch.setInvisibleTime(30000L);
        CompletableFuture<AckResult> cf = new CompletableFuture<>();
        api.changeInvisibleTimeAsync(brokerName, broker, ch, 5000, new AckCallback() {
            public void onSuccess(AckResult r) { cf.complete(r); }
            public void onException(Throwable e) { cf.completeExceptionally(e); }
        });
        AckResult cr = cf.get(10, TimeUnit.SECONDS);
        String[] nck = cr.getExtraInfo() == null ? new String[0] : cr.getExtraInfo().split(" ");
        out("changeInvisible", fields("status", cr.getStatus().name(), "newFields", nck.length,
            "newInvisible", nck.length > 2 ? nck[2] : "", "newOffset", nck.length > 7 ? nck[7] : ""));

        List<String> rest = new ArrayList<>();
        for (int i = 2; i < got.size(); i++) rest.add(got.get(i).getProperty(MessageConst.PROPERTY_POP_CK));
        CompletableFuture<AckResult> bf = new CompletableFuture<>();
        api.batchAckMessageAsync(broker, 5000, new AckCallback() {
            public void onSuccess(AckResult r) { bf.complete(r); }
            public void onException(Throwable e) { bf.completeExceptionally(e); }
        }, topic, group, rest);
        out("batchAck", fields("status", bf.get(10, TimeUnit.SECONDS).getStatus().name()));

        // nothing is visible now: first acked, second invisible 30 s, the rest batch-acked
        PopMessageRequestHeader h = new PopMessageRequestHeader();
        h.setConsumerGroup(group); h.setTopic(topic); h.setQueueId(-1); h.setMaxMsgNums(32);
        h.setInvisibleTime(20000); h.setPollTime(1000); h.setBornTime(System.currentTimeMillis());
        h.setInitMode(0);
        CompletableFuture<PopResult> f = new CompletableFuture<>();
        api.popMessageAsync(brokerName, broker, h, 10000, new PopCallback() {
            public void onSuccess(PopResult r) { f.complete(r); }
            public void onException(Throwable e) { f.completeExceptionally(e); }
        });
        PopResult after = f.get(15, TimeUnit.SECONDS);
        out("after", fields("status", after.getPopStatus().name(), "n", after.getMsgFoundList() == null ? 0 : after.getMsgFoundList().size()));
        pc.shutdown();
    }
}
