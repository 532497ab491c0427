# Sourced by run-guest.sh: chooses qemu's accelerator for the soft-RoCE guest and sets
#   GUEST_ACCEL   kvm or tcg
#   ACCEL_ARGS    qemu's arguments for it
#   ACCEL_WHY     one line saying why (printed by run-guest.sh)
# KVM when /dev/kvm is readable and writable and the host kernel's KVM runs unmodified guests
# (kvm_intel or kvm_amd loaded, or the CPU flags vmx/svm); otherwise TCG, software emulation.
# A /dev/kvm from another backend (kvm_pvm, the pagetable-based VM of some sandboxes, which
# needs no vmx/svm) opens and creates VMs, but it runs only kernels built as PVM guests:
# Debian's kernel hangs there after its real-mode setup. TANDEM_GUEST_ACCEL=kvm|tcg overrides
# the choice. The probe reads KVM_DEV, SYS_MODULE and CPUINFO (the host's by default; the test
# points them at files of its own).
guest_accel_choose() {
  local forced="${TANDEM_GUEST_ACCEL:-}" mods
  local dev="${KVM_DEV:-/dev/kvm}" sysmod="${SYS_MODULE:-/sys/module}" cpuinfo="${CPUINFO:-/proc/cpuinfo}"
  case "$forced" in
    '' | kvm | tcg) ;;
    *)
      echo "run-guest: TANDEM_GUEST_ACCEL must be kvm or tcg, not '$forced'" >&2
      return 2
      ;;
  esac
  if [[ "$forced" == tcg ]]; then
    guest_accel_tcg "TANDEM_GUEST_ACCEL=tcg"
  elif [[ "$forced" == kvm ]]; then
    guest_accel_kvm "TANDEM_GUEST_ACCEL=kvm"
  elif [[ ! -e "$dev" ]]; then
    guest_accel_tcg "no $dev"
  elif [[ ! -r "$dev" || ! -w "$dev" ]]; then
    guest_accel_tcg "$dev is not readable and writable by $(id -un)"
  elif [[ -d "$sysmod/kvm_intel" || -d "$sysmod/kvm_amd" ]] || grep -qwE 'vmx|svm' "$cpuinfo"; then
    guest_accel_kvm "$dev with hardware virtualization"
  else
    mods="$(cd "$sysmod" && ls -d kvm* 2>/dev/null | paste -sd' ' -)"
    guest_accel_tcg "$dev is there but without hardware virtualization (no vmx/svm; modules: ${mods:-none}), which does not run Debian's kernel"
  fi
}

guest_accel_kvm() {
  GUEST_ACCEL=kvm
  ACCEL_ARGS=(-accel kvm -cpu host)
  ACCEL_WHY="KVM ($1)"
}

guest_accel_tcg() {
  GUEST_ACCEL=tcg
  ACCEL_ARGS=(-accel tcg,thread=multi)
  ACCEL_WHY="TCG, software emulation: $1"
}
