package io.ferrymq.interop;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;

/** What a user sees, as JSON-ready maps: raw values; tests/interop/normalise.py evens out hosts,
 * ports, ids and timestamps. */
final class Obs {
    private Obs() {
    }

    static Map<String, Object> send(SendResult r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("status", String.valueOf(r.getSendStatus()));
        m.put("topic", r.getMessageQueue().getTopic());
        m.put("brokerName", r.getMessageQueue().getBrokerName());
        m.put("queueId", r.getMessageQueue().getQueueId());
        m.put("queueOffset", r.getQueueOffset());
        m.put("msgId", r.getMsgId());
        m.put("offsetMsgId", r.getOffsetMsgId());
        m.put("transactionId", r.getTransactionId());
        m.put("regionId", r.getRegionId());
        m.put("traceOn", r.isTraceOn());
        return m;
    }

    static Map<String, Object> message(Message msg) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("topic", msg.getTopic());
        m.put("tags", msg.getTags());
        m.put("keys", msg.getKeys());
        m.put("body", msg.getBody() == null ? null : new String(msg.getBody(), StandardCharsets.UTF_8));
        m.put("flag", msg.getFlag());
        if (msg instanceof MessageExt) {
            MessageExt e = (MessageExt) msg;
            m.put("queueId", e.getQueueId());
            m.put("queueOffset", e.getQueueOffset());
            m.put("reconsumeTimes", e.getReconsumeTimes());
            m.put("sysFlag", e.getSysFlag());
            m.put("storeSize", e.getStoreSize());
            m.put("bodyCRC", e.getBodyCRC());
            m.put("bornHost", String.valueOf(e.getBornHost()));
            m.put("storeHost", String.valueOf(e.getStoreHost()));
            m.put("bornTimestamp", e.getBornTimestamp());
            m.put("storeTimestamp", e.getStoreTimestamp());
            m.put("commitLogOffset", e.getCommitLogOffset());
            m.put("preparedTransactionOffset", e.getPreparedTransactionOffset());
            m.put("msgId", e.getMsgId());
            if (e instanceof MessageClientExt) {
                m.put("offsetMsgId", ((MessageClientExt) e).getOffsetMsgId());
            }
        }
        m.put("properties", new TreeMap<>(msg.getProperties()));
        return m;
    }

    static List<Map<String, Object>> messages(List<? extends Message> msgs) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Message msg : msgs) {
            out.add(message(msg));
        }
        return out;
    }

    /** Sorted by (queueId, queueOffset): a push consumer's delivery order across queues is not
     * part of the contract. */
    static List<Map<String, Object>> sorted(List<MessageExt> msgs) {
        List<MessageExt> copy = new ArrayList<>(msgs);
        copy.sort(Comparator.comparingInt(MessageExt::getQueueId)
            .thenComparingLong(MessageExt::getQueueOffset)
            .thenComparingInt(MessageExt::getReconsumeTimes));
        return messages(copy);
    }

    static Map<String, Object> error(Throwable e) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("class", e.getClass().getName());
        if (e instanceof MQClientException) {
            m.put("code", ((MQClientException) e).getResponseCode());
            m.put("remark", ((MQClientException) e).getErrorMessage());
        } else if (e instanceof MQBrokerException) {
            m.put("code", ((MQBrokerException) e).getResponseCode());
            m.put("remark", ((MQBrokerException) e).getErrorMessage());
        } else {
            m.put("message", e.getMessage());
        }
        if (e.getCause() != null && e.getCause() != e) {
            m.put("cause", error(e.getCause()));
        }
        return m;
    }
}
