// A scenario of the Node.js 5.x client (rocketmq-client-nodejs 1.0.8) against a proxy:
// node node5_client.js <endpoint> <topic> <group> <budget_s>. A producer sends one message with
// a tag, keys and a property; a SimpleConsumer receives it and acks. One JSON line per event.
'use strict';
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

function emit(event, fields) {
  console.log(JSON.stringify(Object.assign({ event }, fields || {})));
}

async function main() {
  const [endpoint, topic, group, budget] = process.argv.slice(2);
  const deadline = Date.now() + Number(budget) * 1000;
  const nonce = `${process.pid}-${Date.now()}`;
  const producer = new Producer({ endpoints: endpoint });
  await producer.startup();
  const receipt = await producer.send({
    topic,
    tag: 'TagA',
    keys: [ 'k1' ],
    properties: new Map().set('pk', 'pv'),
    body: Buffer.from(`${nonce}:node-1`),
  });
  emit('sent', { id: receipt.messageId });
  await producer.shutdown();
  const consumer = new SimpleConsumer({
    consumerGroup: group,
    endpoints: endpoint,
    subscriptions: new Map().set(topic, '*'),
  });
  await consumer.startup();
  try {
    while (Date.now() < deadline) {
      const messages = await consumer.receive(16, 15000);
      for (const m of messages) {
        await consumer.ack(m);
        if (m.body.toString().startsWith(nonce)) {
          emit('received', {
            id: m.messageId, tag: m.tag, keys: m.keys,
            props: Object.fromEntries(m.properties), attempt: m.deliveryAttempt,
          });
          emit('done');
          return;
        }
      }
    }
    emit('timeout');
  } finally {
    await consumer.shutdown();
  }
}

main().then(() => process.exit(0), err => {
  emit('error', { type: err && err.name, message: String(err && err.message) });
  process.exit(2);
});
