import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  matchThunderboltLinks,
  parseHardwarePorts,
  parseIbvDevices,
  parseIbvDevinfo,
  parseIfconfig,
  parseRdmaCtlStatus,
  parseThunderbolt,
} from './macos.js';
import { readLinuxInterfaces, readLinuxRdma } from './linux.js';
import { probeHost, runCommand, runWithin } from './host.js';
import { isTandemError } from '../../errors/index.js';

const dir = new URL('../../../test/fixtures/topology/macos/', import.meta.url);
const fixture = (name: string): string => readFileSync(new URL(name, dir), 'utf8');

test('networksetup: hardware port names to devices', () => {
  const ports = parseHardwarePorts(fixture('studio-a-networksetup-listallhardwareports.txt'));
  assert.equal(ports.get('Thunderbolt 1'), 'en2');
  assert.equal(ports.get('Thunderbolt 3'), 'en4');
  assert.equal(ports.get('Thunderbolt Bridge'), 'bridge0');
  assert.equal(ports.get('Wi-Fi'), 'en1');
  assert.equal(ports.size, 6);
});

test('system_profiler: receptacles, speeds, interfaces and the host behind each cable', () => {
  const ports = parseThunderbolt(
    fixture('studio-a-system-profiler-thunderbolt.json'),
    parseHardwarePorts(fixture('studio-a-networksetup-listallhardwareports.txt')),
  );
  assert.equal(ports.length, 3);
  assert.deepEqual(ports[0], {
    receptacle: '1',
    domainUuid: 'A0000000-0000-4000-8000-00000000000A',
    iface: 'en2',
    speedGbps: 120,
  });
  assert.deepEqual(ports[1]?.peer, { domainUuid: 'B0000000-0000-4000-8000-00000000000B', name: 'Mac mini' });
  assert.equal(ports[1]?.iface, 'en3');
  assert.equal(ports[2]?.speedGbps, 40);
  assert.throws(
    () => parseThunderbolt('not json'),
    (e) => isTandemError(e, 'TOPOLOGY_BAD_PROBE_OUTPUT'),
  );
  assert.throws(
    () => parseThunderbolt('{}'),
    (e) => isTandemError(e, 'TOPOLOGY_BAD_PROBE_OUTPUT'),
  );
});

test("two Macs' Thunderbolt reports match into one cable, interface to interface", () => {
  const a = parseThunderbolt(
    fixture('studio-a-system-profiler-thunderbolt.json'),
    parseHardwarePorts(fixture('studio-a-networksetup-listallhardwareports.txt')),
  );
  const b = parseThunderbolt(
    fixture('mini-b-system-profiler-thunderbolt.json'),
    parseHardwarePorts(fixture('mini-b-networksetup-listallhardwareports.txt')),
  );
  const links = matchThunderboltLinks([
    { host: 'studio-a', ports: a },
    { host: 'mini-b', ports: b },
  ]);
  assert.deepEqual(links, [
    { a: 'studio-a', aPort: 'en3', b: 'mini-b', bPort: 'en2', kind: 'tb5', speedGbps: 80 },
  ]);
});

test('ifconfig: flags, MTU, addresses, carrier and bridge members', () => {
  const ifs = parseIfconfig(fixture('studio-a-ifconfig.txt'));
  const by = new Map(ifs.map((i) => [i.name, i]));
  assert.deepEqual([...by.keys()], ['lo0', 'en0', 'en2', 'en3', 'en4', 'bridge0']);
  assert.equal(by.get('lo0')?.kind, 'loopback');
  assert.deepEqual(by.get('en0')?.ipv4, ['192.168.1.20']);
  assert.equal(by.get('en2')?.carrier, false);
  assert.equal(by.get('en3')?.carrier, true);
  assert.deepEqual(by.get('en3')?.ipv6LinkLocal, ['fe80::34a1:ff:fe00:3']);
  assert.equal(by.get('en4')?.mtu, 9000);
  assert.deepEqual(by.get('en4')?.ipv4, ['169.254.12.7']);
  assert.deepEqual(by.get('bridge0'), {
    name: 'bridge0',
    up: true,
    kind: 'bridge',
    mtu: 1500,
    mac: '36:a1:00:00:00:10',
    ipv4: [],
    ipv6LinkLocal: [],
    members: ['en2', 'en3', 'en4'],
    carrier: true,
  });
});

test('rdma_ctl, ibv_devices and ibv_devinfo', () => {
  assert.equal(parseRdmaCtlStatus(fixture('rdma-ctl-status-enabled.txt')), true);
  assert.equal(parseRdmaCtlStatus(fixture('rdma-ctl-status-disabled.txt')), false);
  assert.equal(parseRdmaCtlStatus('usage: rdma_ctl'), undefined);
  assert.deepEqual(parseIbvDevices(fixture('ibv-devices.txt')), ['rdma_en2', 'rdma_en3', 'rdma_en4']);
  const devs = parseIbvDevinfo(fixture('ibv-devinfo.txt'));
  assert.deepEqual(
    devs.map((d) => [d.name, d.netdev, d.transport, d.ports[0]?.state, d.ports[0]?.active]),
    [
      ['rdma_en2', 'en2', 'Thunderbolt (100)', 'PORT_DOWN', false],
      ['rdma_en3', 'en3', 'Thunderbolt (100)', 'PORT_ACTIVE', true],
      ['rdma_en4', 'en4', 'Thunderbolt (100)', 'PORT_INIT', false],
    ],
  );
  assert.equal(devs[1]?.ports[0]?.activeMtu, 1024);
  assert.equal(devs[1]?.ports[0]?.linkLayer, 'Thunderbolt');
});

test('probeHost on macOS runs each tool and joins the results', async () => {
  const outputs: Record<string, string> = {
    networksetup: fixture('studio-a-networksetup-listallhardwareports.txt'),
    system_profiler: fixture('studio-a-system-profiler-thunderbolt.json'),
    ifconfig: fixture('studio-a-ifconfig.txt'),
    rdma_ctl: fixture('rdma-ctl-status-enabled.txt'),
  };
  const report = await probeHost(async (file) => {
    const out = outputs[file];
    if (out === undefined) throw new Error(`${file}: not found`);
    return out;
  }, 'darwin');
  assert.equal(report.rdma.enabled, true);
  assert.deepEqual(report.rdma.devices, []);
  assert.match(report.notes.join('\n'), /ibv_devinfo: ibv_devinfo: not found/);
  const en3 = report.interfaces.find((i) => i.name === 'en3');
  assert.equal(en3?.kind, 'tb5');
  assert.equal(report.interfaces.find((i) => i.name === 'en4')?.kind, 'tb4');
  assert.equal(report.interfaces.find((i) => i.name === 'en0')?.kind, 'ethernet');
  assert.equal(report.thunderbolt.length, 3);
});

test('Linux: interfaces and verbs devices from sysfs', () => {
  const root = mkdtempSync(join(tmpdir(), 'tandem-sysfs-'));
  try {
    const put = (path: string, text: string): void => {
      mkdirSync(join(root, path, '..'), { recursive: true });
      writeFileSync(join(root, path), text + '\n');
    };
    put('net/lo/type', '772');
    put('net/lo/operstate', 'unknown');
    put('net/lo/flags', '0x9');
    put('net/eth0/type', '1');
    put('net/eth0/operstate', 'up');
    put('net/eth0/carrier', '1');
    put('net/eth0/flags', '0x1003');
    put('net/eth0/mtu', '9000');
    put('net/eth0/speed', '25000');
    put('net/eth0/address', '02:00:00:00:00:01');
    put('net/wlan0/type', '1');
    put('net/wlan0/flags', '0x1002');
    put('net/wlan0/carrier', '0');
    mkdirSync(join(root, 'net/wlan0/wireless'));
    put('net/br0/type', '1');
    put('net/br0/flags', '0x1003');
    mkdirSync(join(root, 'net/br0/bridge'));
    mkdirSync(join(root, 'net/br0/brif/eth0'), { recursive: true });
    mkdirSync(join(root, 'drivers/thunderbolt-net'), { recursive: true });
    put('net/thunderbolt0/type', '1');
    put('net/thunderbolt0/flags', '0x1003');
    mkdirSync(join(root, 'net/thunderbolt0/device'), { recursive: true });
    symlinkSync(join(root, 'drivers/thunderbolt-net'), join(root, 'net/thunderbolt0/device/driver'));
    put('ib/mlx5_0/node_type', '1: CA');
    put('ib/mlx5_0/ports/1/state', '4: ACTIVE');
    put('ib/mlx5_0/ports/1/link_layer', 'Ethernet');
    mkdirSync(join(root, 'ib/mlx5_0/device/net/eth0'), { recursive: true });
    const ifs = new Map(readLinuxInterfaces(join(root, 'net')).map((i) => [i.name, i]));
    assert.equal(ifs.get('lo')?.kind, 'loopback');
    assert.deepEqual(ifs.get('eth0'), {
      name: 'eth0',
      up: true,
      carrier: true,
      kind: 'ethernet',
      mtu: 9000,
      speedGbps: 25,
      mac: '02:00:00:00:00:01',
      ipv4: [],
      ipv6LinkLocal: [],
    });
    assert.equal(ifs.get('wlan0')?.kind, 'wifi');
    assert.equal(ifs.get('wlan0')?.up, false);
    assert.deepEqual(ifs.get('br0')?.members, ['eth0']);
    assert.equal(ifs.get('thunderbolt0')?.kind, 'tb4');
    assert.deepEqual(readLinuxRdma(join(root, 'ib')), [
      {
        name: 'mlx5_0',
        transport: '1: CA',
        netdev: 'eth0',
        ports: [{ port: 1, state: 'ACTIVE', active: true, linkLayer: 'Ethernet' }],
      },
    ]);
    assert.deepEqual(readLinuxRdma(join(root, 'missing')), []);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('Linux: the real /sys/class/net has a loopback', () => {
  if (process.platform !== 'linux') return;
  const lo = readLinuxInterfaces().find((i) => i.name === 'lo');
  assert.equal(lo?.kind, 'loopback');
});

/** Whether `pid` still runs (a killed process may linger as a zombie until reaped). */
function running(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

test(
  'a probe past its deadline is killed with everything it started',
  { skip: process.platform !== 'linux' },
  async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'tandem-probe-'));
    const pidFile = join(tmp, 'pid');
    try {
      const started = Date.now();
      // The shell starts a long sleep that keeps stdout open, as ssh's remote command would.
      await assert.rejects(
        runWithin(300, 'sh', ['-c', `sleep 200 & echo $! > ${pidFile}; wait`]),
        /sh -c .*: no answer within 300 ms \(killed it and what it started\)/,
      );
      assert.ok(Date.now() - started < 3000);
      const sleeper = Number(readFileSync(pidFile, 'utf8'));
      const deadline = Date.now() + 2000;
      while (running(sleeper) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(running(sleeper), false, `the grandchild sleep (pid ${sleeper}) was left running`);
      assert.equal(process.listenerCount('SIGINT'), 0);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  },
);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  test(
    `${signal} while a probe runs kills the probe with everything it started, and still ends the process by ${signal}`,
    { skip: process.platform !== 'linux' },
    async () => {
      const tmp = mkdtempSync(join(tmpdir(), 'tandem-probe-signal-'));
      const pidFile = join(tmp, 'pid');
      const host = new URL('./host.ts', import.meta.url).href;
      const code = `
      const { runWithin } = await import(${JSON.stringify(host)});
      await runWithin(20000, 'sh', ['-c', 'sleep 200 & echo $! > ${pidFile}.part && mv ${pidFile}.part ${pidFile}; wait']);`;
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
        stdio: 'ignore',
      });
      try {
        const ended = new Promise<NodeJS.Signals | null>((resolve) =>
          child.on('exit', (_code, s) => resolve(s)),
        );
        const deadline = Date.now() + 15000;
        let sleeper = 0;
        while (Date.now() < deadline && child.exitCode === null) {
          try {
            sleeper = Number(readFileSync(pidFile, 'utf8'));
            break;
          } catch {
            await new Promise((r) => setTimeout(r, 20));
          }
        }
        assert.ok(sleeper > 0, 'the probe did not start its sleep within 15 s');
        child.kill(signal);
        const timeout = new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error('the process did not end within 10 s')), 10000).unref(),
        );
        assert.equal(await Promise.race([ended, timeout]), signal);
        const gone = Date.now() + 2000;
        while (running(sleeper) && Date.now() < gone) await new Promise((r) => setTimeout(r, 20));
        assert.equal(running(sleeper), false, `the probe's sleep (pid ${sleeper}) was left running`);
      } finally {
        child.kill('SIGKILL');
        rmSync(tmp, { recursive: true, force: true });
      }
    },
  );
}

test('runCommand returns stdout, and a failing command rejects with its stderr', async () => {
  assert.equal(await runCommand('sh', ['-c', 'echo hi']), 'hi\n');
  await assert.rejects(
    runCommand('sh', ['-c', 'echo oops >&2; exit 3']),
    /^Error: Command failed: sh -c .*\(exit 3\)\noops$/,
  );
  await assert.rejects(runCommand('/nonexistent/tool', []), /ENOENT/);
});
