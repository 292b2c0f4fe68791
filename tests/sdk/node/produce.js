// Run the official RocketMQ 5 Node.js SDK (rocketmq-client-nodejs) as a real producer against
// PocketMQ. Usage: node produce.js --endpoint HOST:PORT --plan '<json list of scenarios>'
// Scenarios: {"name", "kind": "normal" | "fifo", "topic", "count", "groups" (fifo), "tag", "keys"}.
// Prints one JSON line per scenario ({"name", "receipts"} or {"name", "error"}) and {"event": "done"}.
'use strict';

const { Producer } = require('rocketmq-client-nodejs');

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}

const quiet = { info() {}, warn() {}, debug() {}, error(...a) { process.stderr.write(a.join(' ') + '\n'); } };

async function run(producer, sc) {
  const receipts = [];
  const base = { topic: sc.topic };
  if (sc.tag) base.tag = sc.tag;
  if (sc.keys) base.keys = sc.keys;
  if (sc.kind === 'normal') {
    for (let i = 0; i < sc.count; i++) {
      const r = await producer.send({ ...base, body: Buffer.from(`${sc.name}-${i}`) });
      receipts.push({ message_id: r.messageId, offset: Number(r.offset), i });
    }
  } else if (sc.kind === 'fifo') {
    for (let i = 0; i < sc.count; i++) {
      for (const group of sc.groups) {
        const r = await producer.send({ ...base, messageGroup: group, body: Buffer.from(`${group}:${i}`) });
        receipts.push({ message_id: r.messageId, offset: Number(r.offset), group, i });
      }
    }
  } else {
    throw new Error(`unknown scenario kind ${sc.kind}`);
  }
  return { name: sc.name, receipts };
}

async function main() {
  const plan = JSON.parse(arg('--plan'));
  const topics = [...new Set(plan.map((sc) => sc.topic))];
  const producer = new Producer({ endpoints: arg('--endpoint'), namespace: '', topics, logger: quiet });
  await producer.startup();
  try {
    for (const sc of plan) {
      try {
        console.log(JSON.stringify(await run(producer, sc)));
      } catch (err) {
        console.log(JSON.stringify({ name: sc.name, error: `${err.name}: ${err.message}` }));
      }
    }
  } finally {
    await producer.shutdown();
  }
  console.log(JSON.stringify({ event: 'done' }));
}

main().then(() => process.exit(0), (err) => {
  console.log(JSON.stringify({ event: 'failed', error: `${err.name}: ${err.message}` }));
  process.exit(1);
});
