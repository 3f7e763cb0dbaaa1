// Screenshots of a running rocketmq-dashboard in headless Debian Chromium (playwright-core), and a
// log of every /api answer it got (status, errMsg) and every toast it showed, for comparing the
// same pages against ferrymq and Apache RocketMQ. Not a test: docs/dashboard/README.md.
//
//   NODE_PATH=<dir with playwright-core> node scripts/dashboard/screenshots.cjs URL OUT_DIR PREFIX
//
// The topics and groups are the ones scripts/dashboard/cluster.py seeds.
const fs = require('fs');
const os = require('os');
const path = require('path');
const {chromium} = require('playwright-core');

const [base, outDir, prefix] = process.argv.slice(2);
if (!base || !outDir || !prefix) {
  console.error('usage: screenshots.cjs URL OUT_DIR PREFIX');
  process.exit(2);
}
const TOPIC = 'DashOrders';
const LAGGING = 'DashBilling';
const ONLINE = 'DashShipping';
const PRODUCER_GROUP = 'DashProducerGroup';

const log = [];
const note = (line) => {
  log.push(line);
  console.log(line);
};

async function settle(page) {
  // the pages fetch on mount; wait for the network, then for antd's spinners to go
  await page.waitForLoadState('networkidle', {timeout: 60000}).catch(() => note('networkidle timeout'));
  await page.waitForFunction(() => !document.querySelector('.ant-spin-spinning'), null, {timeout: 60000})
    .catch(() => note('spinner still spinning'));
}

async function shot(page, name, waitFor) {
  // waitFor: a locator that shows the page has rendered its data (a row, a modal)
  if (waitFor) await waitFor.first().waitFor({timeout: 120000}).catch(() => note(`[${name}] not shown: ${waitFor}`));
  await settle(page);
  const toasts = await page.locator('.ant-message-notice, .ant-notification-notice, .Toastify__toast').allInnerTexts();
  for (const t of toasts) note(`[${name}] toast: ${t.replace(/\s+/g, ' ').trim()}`);
  await page.screenshot({path: path.join(outDir, `${prefix}-${name}.png`)});
  note(`[${name}] saved`);
}

async function pickTopic(page, scope, topic) {
  await scope.locator('.ant-select').first().click();
  await page.keyboard.type(topic);
  await page.locator(`.ant-select-item-option[title="${topic}"]`).first().click();
}

async function closeModal(page) {
  const close = page.locator('.ant-modal-close:visible');
  if (await close.count()) await close.last().click();
  else await page.keyboard.press('Escape');
  for (const modal of await page.locator('.ant-modal-content:visible').all()) {
    await modal.waitFor({state: 'hidden', timeout: 30000});
  }
}

async function main() {
  fs.mkdirSync(outDir, {recursive: true});
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'dashboard-chromium-'));
  // a fresh --user-data-dir (Playwright passes it from the persistent context's directory)
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: {width: 1280, height: 800},
  });
  try {
    const page = await context.newPage();
    page.on('response', async (resp) => {
      const url = resp.url();
      if (!url.startsWith(base) || !/\.(query|do)|\/api\//.test(url)) return;
      let summary = `${resp.status()}`;
      try {
        const body = await resp.json();
        summary += ` status=${body.status} errMsg=${body.errMsg ?? ''}`;
      } catch (e) {
        summary += ' (not json)';
      }
      note(`api ${url.slice(base.length)} -> ${summary}`);
    });
    page.on('console', (msg) => {
      if (msg.type() === 'error') note(`console error: ${msg.text()}`);
    });

    await page.goto(`${base}/#/cluster`);
    await shot(page, '01-cluster', page.locator('tr', {hasText: 'broker-a'}));

    await page.goto(`${base}/#/topic`);
    // topics created without a message.type attribute are UNSPECIFIED (on Apache too); the
    // page shows NORMAL ones only until asked
    await page.getByRole('checkbox', {name: 'UNSPECIFIED'}).check({timeout: 120000});
    await shot(page, '02-topic', page.locator('tr', {hasText: TOPIC}));
    const topicRow = page.locator('tr', {hasText: TOPIC}).first();
    await topicRow.getByRole('button', {name: /status/i}).click();
    await shot(page, '03-topic-status', page.locator('.ant-modal-body tr'));
    await closeModal(page);
    await topicRow.getByRole('button', {name: /router/i}).click();
    await shot(page, '04-topic-route', page.locator('.ant-modal-body'));
    await closeModal(page);

    await page.goto(`${base}/#/consumer`);
    await shot(page, '05-consumer', page.locator('tr', {hasText: LAGGING}));
    await page.locator('tr', {hasText: LAGGING}).first()
      .getByRole('button', {name: /consume detail/i}).click();
    await shot(page, '06-consumer-detail-lagging', page.locator('.ant-modal-body tr'));
    await closeModal(page);
    await page.locator('tr', {hasText: ONLINE}).first()
      .getByRole('button', {name: /^client$/i}).click();
    await shot(page, '07-consumer-client', page.locator('.ant-modal-body'));
    await closeModal(page);

    await page.goto(`${base}/#/message`);
    await page.locator('.ant-tabs-tabpane-active .ant-select').first().waitFor({timeout: 120000});
    await settle(page);
    await pickTopic(page, page.locator('.ant-tabs-tabpane-active'), TOPIC);
    await page.locator('.ant-tabs-tabpane-active').getByRole('button', {name: /search/i}).click();
    await shot(page, '08-message', page.locator('tr', {hasText: TOPIC}));

    await page.goto(`${base}/#/producer`);
    await page.locator('form .ant-select').first().waitFor({timeout: 120000});
    await settle(page);
    await pickTopic(page, page.locator('form'), TOPIC);
    await page.locator('form input#producerGroup, form .ant-input').first().fill(PRODUCER_GROUP);
    await page.getByRole('button', {name: /search/i}).click();
    await shot(page, '09-producer', page.locator('tr', {hasText: '127.0.0.1'}));
  } finally {
    fs.writeFileSync(path.join(outDir, `${prefix}-log.txt`), log.join('\n') + '\n');
    await context.close();
    fs.rmSync(profile, {recursive: true, force: true});
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
