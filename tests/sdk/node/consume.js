// Run the official RocketMQ 5 Node.js SDK's SimpleConsumer against PocketMQ.
// Usage: node consume.js --endpoint HOST:PORT --topic T --group G --count N [--timeout S]
// Receives (invisible 15 s) and acks until N messages were acked or the timeout passed; prints
// {"name": "consume", "messages": [{"message_id", "body", "attempt", "tag"}]} and {"event": "done"}.
'use strict';

const { SimpleConsumer } = require('rocketmq-client-nodejs');

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) {
    if (fallback !== undefined) return fallback;
    throw new Error(`missing ${name}`);
  }
  return process.argv[i + 1];
}

const quiet = { info() {}, warn() {}, debug() {}, error(...a) { process.stderr.write(a.join(' ') + '\n'); } };

async function main() {
  const count = Number(arg('--count'));
  const deadline = Date.now() + Number(arg('--timeout', '60')) * 1000;
  const consumer = new SimpleConsumer({
    endpoints: arg('--endpoint'), namespace: '', consumerGroup: arg('--group'), logger: quiet,
    subscriptions: new Map().set(arg('--topic'), '*'), awaitDuration: 2000,
  });
  await consumer.startup();
  const messages = [];
  try {
    while (messages.length < count && Date.now() < deadline) {
      for (const m of await consumer.receive(16, 15000)) {
        await consumer.ack(m);
        messages.push({ message_id: m.messageId, body: m.body.toString(), attempt: m.deliveryAttempt, tag: m.tag });
      }
    }
  } finally {
    await consumer.shutdown();
  }
  console.log(JSON.stringify({ name: 'consume', messages }));
  console.log(JSON.stringify({ event: 'done' }));
}

main().then(() => process.exit(0), (err) => {
  console.log(JSON.stringify({ event: 'failed', error: `${err.name}: ${err.message}` }));
  process.exit(1);
});
