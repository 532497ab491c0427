import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * guest-accel.sh, the soft-RoCE guest's choice of qemu accelerator: KVM only where /dev/kvm
 * runs unmodified guests (kvm_intel / kvm_amd, or vmx / svm in the CPU flags), TCG otherwise,
 * with the reason; TANDEM_GUEST_ACCEL forces one. The probe reads a device, a sysfs module
 * folder and a cpuinfo file that each case makes up.
 */
const script = join(import.meta.dirname, 'guest-accel.sh');

interface Host {
  dev?: boolean;
  modules?: string[];
  flags?: string;
}

function choose(host: Host, forced?: string): { code: number; out: string; err: string } {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-guest-accel-'));
  try {
    const dev = join(dir, 'kvm');
    if (host.dev !== false) writeFileSync(dev, '');
    for (const m of host.modules ?? []) mkdirSync(join(dir, 'module', m), { recursive: true });
    mkdirSync(join(dir, 'module'), { recursive: true });
    writeFileSync(join(dir, 'cpuinfo'), `processor\t: 0\nflags\t\t: fpu sse2 ${host.flags ?? ''}\n`);
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      KVM_DEV: dev,
      SYS_MODULE: join(dir, 'module'),
      CPUINFO: join(dir, 'cpuinfo'),
    };
    delete env['TANDEM_GUEST_ACCEL'];
    if (forced !== undefined) env['TANDEM_GUEST_ACCEL'] = forced;
    const r = spawnSync(
      'bash',
      ['-c', `. '${script}' && guest_accel_choose && echo "$GUEST_ACCEL|\${ACCEL_ARGS[*]}|$ACCEL_WHY"`],
      { env, encoding: 'utf8', timeout: 10_000 },
    );
    return { code: r.status ?? -1, out: r.stdout.trim(), err: r.stderr.trim() };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('guest-accel: KVM with kvm_amd or kvm_intel loaded, or vmx/svm in the flags', () => {
  for (const host of [{ modules: ['kvm', 'kvm_amd'] }, { modules: ['kvm', 'kvm_intel'] }, { flags: 'svm' }]) {
    const r = choose(host);
    assert.equal(r.code, 0, r.err);
    const [accel, args, why] = r.out.split('|');
    assert.equal(accel, 'kvm', JSON.stringify(host));
    assert.equal(args, '-accel kvm -cpu host');
    assert.match(why ?? '', /^KVM \(.*with hardware virtualization\)$/);
  }
});

test('guest-accel: TCG with the reason where /dev/kvm is missing or comes from PVM', () => {
  const missing = choose({ dev: false, modules: ['kvm_amd'] });
  assert.equal(missing.code, 0, missing.err);
  assert.match(missing.out, /^tcg\|-accel tcg,thread=multi\|TCG, software emulation: no .*kvm$/);
  const pvm = choose({ modules: ['kvm', 'kvm_pvm'] });
  assert.equal(pvm.code, 0, pvm.err);
  assert.match(pvm.out, /^tcg\|/);
  assert.match(pvm.out, /without hardware virtualization \(no vmx\/svm; modules: kvm kvm_pvm\)/);
});

test('guest-accel: TANDEM_GUEST_ACCEL forces the choice; another value is refused', () => {
  assert.match(choose({ modules: ['kvm_amd'] }, 'tcg').out, /^tcg\|.*TANDEM_GUEST_ACCEL=tcg/);
  assert.match(choose({ dev: false }, 'kvm').out, /^kvm\|.*TANDEM_GUEST_ACCEL=kvm/);
  const bad = choose({}, 'hvf');
  assert.equal(bad.code, 2);
  assert.equal(bad.out, '');
  assert.match(bad.err, /TANDEM_GUEST_ACCEL must be kvm or tcg, not 'hvf'/);
});
