package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// poll is how often a scenario looks again at a state it waits for (a route, stored messages).
const poll = 200 * time.Millisecond

func resolver(a Args) primitive.NsResolver {
	return primitive.NewPassthroughResolver([]string{a.Namesrv})
}

// newProducer sends to the queue set on each message (msg.Queue), so queue ids and offsets are
// part of what is compared. Each client gets its own instance: clients of one instance share a
// connection set and are shut down together.
func newProducer(a Args, group string) (rocketmq.Producer, error) {
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(resolver(a)),
		producer.WithGroupName(group),
		producer.WithInstanceName(group),
		producer.WithQueueSelector(producer.NewManualQueueSelector()),
		producer.WithRetry(0),
	)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// queues of "topic" sorted by broker and id, waiting (until the deadline) for the NameServer
// to have a route: a new topic's route reaches the NameServer with the broker's next register.
func queues(a Args, topic string, until time.Time) ([]*primitive.MessageQueue, error) {
	adm, err := admin.NewAdmin(admin.WithResolver(resolver(a)))
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	for {
		mqs, err := adm.FetchPublishMessageQueues(context.Background(), topic)
		if err == nil && len(mqs) > 0 {
			sort.Slice(mqs, func(i, j int) bool {
				if mqs[i].BrokerName != mqs[j].BrokerName {
					return mqs[i].BrokerName < mqs[j].BrokerName
				}
				return mqs[i].QueueId < mqs[j].QueueId
			})
			return mqs, nil
		}
		if time.Now().After(until) {
			return nil, fmt.Errorf("no route for %s: %v", topic, err)
		}
		time.Sleep(poll)
	}
}

// readBack is every message of "topic", pulled from each queue's first offset, once the
// queues hold "expected" in all (or the deadline passed: then what is there).
func readBack(a Args, topic string, expected int, until time.Time) ([]map[string]any, error) {
	mqs, err := queues(a, topic, until)
	if err != nil {
		return nil, err
	}
	group := a.Group + "_readback"
	pc, err := rocketmq.NewPullConsumer(
		consumer.WithNsResolver(resolver(a)),
		consumer.WithGroupName(group),
		consumer.WithInstance(group),
	)
	if err != nil {
		return nil, err
	}
	if err := pc.Subscribe(topic, consumer.MessageSelector{}); err != nil {
		return nil, err
	}
	if err := pc.Start(); err != nil {
		return nil, err
	}
	defer pc.Shutdown()
	for {
		var got []*primitive.MessageExt
		for _, mq := range mqs {
			queue := *mq
			result, err := pc.PullFrom(context.Background(), &queue, 0, 32)
			if err != nil {
				return nil, fmt.Errorf("pull %s: %w", mq, err)
			}
			for _, m := range result.GetMessageExts() {
				if m.Queue == nil {
					m.Queue = mq
				}
				got = append(got, m)
			}
		}
		if len(got) >= expected || time.Now().After(until) {
			return sorted(got), nil
		}
		time.Sleep(poll)
	}
}

// producerFor starts a producer of "group" and looks up the queues of a.Topic.
func producerFor(a Args, group string, until time.Time) (rocketmq.Producer, []*primitive.MessageQueue, error) {
	p, err := newProducer(a, group)
	if err != nil {
		return nil, nil, err
	}
	mqs, err := queues(a, a.Topic, until)
	if err != nil {
		p.Shutdown()
		return nil, nil, err
	}
	return p, mqs, nil
}

// sendSyncAll sends each message to its queue (msg.Queue) one at a time; the results.
func sendSyncAll(p rocketmq.Producer, msgs []*primitive.Message) []any {
	results := make([]any, 0, len(msgs))
	for _, m := range msgs {
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			results = append(results, failure(err))
		} else {
			results = append(results, sendResult(r))
		}
	}
	return results
}

// send: "count" messages with tags, keys and user properties, sync / async / oneway, one at a
// time, round robin over the queues; the send results, then every stored message.
func send(a Args) (any, error) {
	until := a.deadline()
	p, mqs, err := producerFor(a, a.Group, until)
	if err != nil {
		return nil, err
	}
	msgs := make([]*primitive.Message, 0, a.Count)
	for i := 0; i < a.Count; i++ {
		m := primitive.NewMessage(a.Topic, []byte(a.Mode+"-"+strconv.Itoa(i)))
		m.WithTag("Tag" + strconv.Itoa(i%2))
		m.WithKeys([]string{"key-" + strconv.Itoa(i), "shared"})
		m.WithProperty("seq", strconv.Itoa(i))
		m.WithProperty("mode", a.Mode)
		m.Queue = mqs[i%len(mqs)]
		msgs = append(msgs, m)
	}
	results := []any{}
	ctx := context.Background()
	switch a.Mode {
	case "sync":
		results = sendSyncAll(p, msgs)
	case "async":
		for _, m := range msgs {
			// one at a time: the queue offsets are then part of the contract
			done := make(chan any, 1)
			err := p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
				if err != nil {
					done <- failure(err)
				} else {
					done <- sendResult(r)
				}
			}, m)
			if err != nil {
				results = append(results, failure(err))
				continue
			}
			select {
			case r := <-done:
				results = append(results, r)
			case <-time.After(time.Until(until)):
				results = append(results, map[string]any{"error": "no callback"})
			}
		}
	case "oneway":
		for _, m := range msgs {
			if err := p.SendOneWay(ctx, m); err != nil {
				results = append(results, failure(err))
			}
		}
		// A fence: a sync send on the same connection, answered only after the broker read
		// every oneway request before it. Without it the producer's Shutdown right after the
		// last SendOneWay (which sets no oneway flag, so the broker answers each one) closed the
		// connection on unread answers and lost a send on Apache RocketMQ too (3 of 4 stored,
		// in a run at load 70) as on ferrymq.
		fence := primitive.NewMessage(a.Topic, []byte("fence"))
		fence.WithProperty("seq", strconv.Itoa(a.Count))
		fence.WithProperty("mode", a.Mode)
		fence.Queue = mqs[0]
		if _, err := p.SendSync(ctx, fence); err != nil {
			results = append(results, failure(err))
		}
	default:
		p.Shutdown()
		return nil, fmt.Errorf("mode %q", a.Mode)
	}
	p.Shutdown()
	expected := a.Count
	if a.Mode == "oneway" {
		expected++ // the fence
	}
	stored, err := readBack(a, a.Topic, expected, until)
	if err != nil {
		return nil, err
	}
	return map[string]any{"sent": results, "stored": stored}, nil
}

// collector keeps what a push consumer's listener got and says when "want" arrived.
type collector struct {
	mu   sync.Mutex
	got  []*primitive.MessageExt
	want int
	done chan struct{}
}

func newCollector(want int) *collector {
	return &collector{want: want, done: make(chan struct{})}
}

func (c *collector) add(msgs []*primitive.MessageExt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := len(c.got)
	c.got = append(c.got, msgs...)
	if before < c.want && len(c.got) >= c.want {
		close(c.done)
	}
}

func (c *collector) wait(until time.Time) []*primitive.MessageExt {
	select {
	case <-c.done:
	case <-time.After(time.Until(until)):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*primitive.MessageExt(nil), c.got...)
}

// pushUntil starts a push consumer of a.Group on a.Topic whose listener answers "answer", and
// waits until it got "want" messages (or the deadline): the consumer, still running, and what
// it got.
func pushUntil(a Args, selector consumer.MessageSelector, want int, until time.Time,
	answer func(context.Context) consumer.ConsumeResult, extra ...consumer.Option,
) (rocketmq.PushConsumer, []*primitive.MessageExt, error) {
	opts := append([]consumer.Option{
		consumer.WithNsResolver(resolver(a)),
		consumer.WithGroupName(a.Group),
		consumer.WithInstance(a.Group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}, extra...)
	c, err := rocketmq.NewPushConsumer(opts...)
	if err != nil {
		return nil, nil, err
	}
	got := newCollector(want)
	err = c.Subscribe(a.Topic, selector, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		got.add(msgs)
		return answer(ctx), nil
	})
	if err == nil {
		err = c.Start()
	}
	if err != nil {
		c.Shutdown()
		return nil, nil, err
	}
	return c, got.wait(until), nil
}

// tagFilter: six messages tagged TagA, TagB, TagC in turn on one queue; a push consumer of
// "TagA || TagC" receives, and what it got once the four matching ones arrived.
func tagFilter(a Args) (any, error) {
	until := a.deadline()
	p, mqs, err := producerFor(a, a.Group+"_P", until)
	if err != nil {
		return nil, err
	}
	tags := []string{"TagA", "TagB", "TagC"}
	msgs := make([]*primitive.Message, 0, 6)
	for i := 0; i < 6; i++ {
		m := primitive.NewMessage(a.Topic, []byte("tag-"+strconv.Itoa(i)))
		m.WithTag(tags[i%3])
		m.WithKeys([]string{"tag-key-" + strconv.Itoa(i)})
		m.Queue = mqs[0]
		msgs = append(msgs, m)
	}
	sent := sendSyncAll(p, msgs)
	p.Shutdown()
	selector := consumer.MessageSelector{Type: consumer.TAG, Expression: "TagA || TagC"}
	c, received, err := pushUntil(a, selector, 4, until, func(context.Context) consumer.ConsumeResult {
		return consumer.ConsumeSuccess
	})
	if err != nil {
		return nil, err
	}
	c.Shutdown()
	return map[string]any{"sent": sent, "received": sorted(received)}, nil
}

// retryDlq: a message the listener always answers ConsumeRetryLater (next try after delay
// level 1, 1 s) with at most one reconsume: its deliveries with their reconsumeTimes, then the
// copy in %DLQ%group, read by a pull consumer.
func retryDlq(a Args) (any, error) {
	until := a.deadline()
	p, mqs, err := producerFor(a, a.Group+"_P", until)
	if err != nil {
		return nil, err
	}
	m := primitive.NewMessage(a.Topic, []byte("always-fails"))
	m.WithTag("TagR")
	m.WithKeys([]string{"retry-key"})
	m.WithProperty("origin", "retry")
	m.Queue = mqs[0]
	sent := sendSyncAll(p, []*primitive.Message{m})
	p.Shutdown()
	retryLater := func(ctx context.Context) consumer.ConsumeResult {
		if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok {
			cc.DelayLevelWhenNextConsume = 1 // retry after 1 s, not the default 10 s
		}
		return consumer.ConsumeRetryLater
	}
	c, deliveries, err := pushUntil(a, consumer.MessageSelector{}, 2, until, retryLater,
		consumer.WithMaxReconsumeTimes(1))
	if err != nil {
		return nil, err
	}
	// read the DLQ while the consumer runs: its last send-back may still be in flight
	var dlq any
	stored, err := readBack(a, "%DLQ%"+a.Group, 1, until)
	if err != nil {
		dlq = failure(err)
	} else {
		dlq = stored
	}
	c.Shutdown()
	return map[string]any{"sent": sent, "deliveries": sorted(deliveries), "dlq": dlq}, nil
}
