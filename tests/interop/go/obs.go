package main

import (
	"sort"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// What a user of the Go client sees, as JSON-ready maps of raw values; tests/interop/normalise.py
// evens out hosts, ports, ids and timestamps.

func sendResult(r *primitive.SendResult) map[string]any {
	return map[string]any{
		"status":        int(r.Status),
		"topic":         r.MessageQueue.Topic,
		"brokerName":    r.MessageQueue.BrokerName,
		"queueId":       r.MessageQueue.QueueId,
		"queueOffset":   r.QueueOffset,
		"msgId":         r.MsgID,
		"offsetMsgId":   r.OffsetMsgID,
		"transactionId": r.TransactionID,
		"regionId":      r.RegionID,
		"traceOn":       r.TraceOn,
	}
}

func failure(err error) map[string]any {
	return map[string]any{"error": err.Error()}
}

func message(m *primitive.MessageExt) map[string]any {
	out := map[string]any{
		"topic":                     m.Topic,
		"tags":                      m.GetTags(),
		"keys":                      m.GetKeys(),
		"body":                      string(m.Body),
		"flag":                      m.Flag,
		"queueOffset":               m.QueueOffset,
		"reconsumeTimes":            m.ReconsumeTimes,
		"sysFlag":                   m.SysFlag,
		"storeSize":                 m.StoreSize,
		"bodyCRC":                   m.BodyCRC,
		"bornHost":                  m.BornHost,
		"storeHost":                 m.StoreHost,
		"bornTimestamp":             m.BornTimestamp,
		"storeTimestamp":            m.StoreTimestamp,
		"commitLogOffset":           m.CommitLogOffset,
		"preparedTransactionOffset": m.PreparedTransactionOffset,
		"msgId":                     m.MsgId,
		"offsetMsgId":               m.OffsetMsgId,
		"properties":                m.GetProperties(),
	}
	if m.Queue != nil {
		out["queueId"] = m.Queue.QueueId
	}
	return out
}

// sorted is by (queueId, queueOffset, reconsumeTimes): a push consumer's delivery order across
// queues and goroutines is not part of the contract.
func sorted(msgs []*primitive.MessageExt) []map[string]any {
	copied := append([]*primitive.MessageExt(nil), msgs...)
	sort.SliceStable(copied, func(i, j int) bool {
		a, b := copied[i], copied[j]
		if a.Queue.QueueId != b.Queue.QueueId {
			return a.Queue.QueueId < b.Queue.QueueId
		}
		if a.QueueOffset != b.QueueOffset {
			return a.QueueOffset < b.QueueOffset
		}
		return a.ReconsumeTimes < b.ReconsumeTimes
	})
	out := make([]map[string]any, 0, len(copied))
	for _, m := range copied {
		out = append(out, message(m))
	}
	return out
}
