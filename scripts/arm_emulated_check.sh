#!/usr/bin/env bash
# Builds spacy_elmo._C for aarch64 Linux (e.g. AWS Graviton) and runs its kernel tests there,
# emulated: an arm64 Debian bookworm userland (debootstrap) run through qemu-user on an x86-64
# Debian or Ubuntu machine. Needs root (debootstrap, chroot, mounts), apt and PyPI (torch's
# aarch64 CPU wheel); no spaCy (the kernel tests run without it). Not part of `make test`.
#
#   sudo bash scripts/arm_emulated_check.sh                 (or `sudo make arm-check`)
#   ARM_TESTS="tests/ops/test_fused_cpu.py -k lstm" sudo -E bash scripts/arm_emulated_check.sh
#
# What it does, each step skipped when already done:
#   1. apt: qemu-user-static, binfmt-support, debootstrap, g++-aarch64-linux-gnu; registers qemu-aarch64;
#   2. ARM_ROOT (default /tmp/arm-root): `debootstrap --arch=arm64 bookworm` with python3.11, g++;
#   3. a venv there (/opt/venv) with ARM_TORCH (default torch==2.9.1, pypi's aarch64 CPU wheel),
#      numpy, pytest, h5py, safetensors, tqdm and the build tools;
#   4. copies this checkout (its files git does not ignore) to ARM_ROOT/src and runs `python setup.py build_ext --inplace`
#      there: setup.py, build_flags.py, torch's BuildExtension and ninja run emulated (aarch64), the
#      compiler is the host's cross g++ for aarch64 (Debian's g++-aarch64-linux-gnu, the same GCC 12 as
#      the userland's), run natively from inside the chroot (ARM_CXX=native: the userland's own g++,
#      emulated; tried here and given up: after 9 minutes not one of the 10 sources had compiled);
#   5. checks that the extension loads (fused_available() is True) and which CPU kernel table runs
#      (aarch64 has the portable `base` one only) and that the process has one OpenMP runtime, torch's
#      (a fused kernel adds no thread under torch.set_num_threads(2) with OMP_NUM_THREADS=6), then runs
#      ARM_TESTS under pytest, emulated: on 2 cores shared with other work (2026-11-26) the build took
#      6 to 12 minutes, the biLM tests 4, tests/ops 27.
# The mounts it makes under ARM_ROOT (and any a killed run left there) are undone at the end; check
# `mount | grep "$ARM_ROOT"` shows none before deleting ARM_ROOT. It also registers qemu-aarch64 with
# the host's binfmt_misc (binfmt-support), host-wide. Exit status: pytest's (2 when the build
# or the load check fails).
set -euo pipefail
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
ARM_ROOT=${ARM_ROOT:-/tmp/arm-root}
ARM_TORCH=${ARM_TORCH:-torch==2.9.1}
ARM_CXX=${ARM_CXX:-cross}
ARM_MIRROR=${ARM_MIRROR:-http://deb.debian.org/debian}
ARM_TESTS=${ARM_TESTS:-tests/ops/test_fused_cpu.py tests/ops/test_fused_inputs.py tests/bilm/test_model_oracle.py
  tests/bilm/test_stateful.py tests/bilm/test_initial_state.py}
VENV=/opt/venv

log() { printf '[arm-check] %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { log "needs root (debootstrap, chroot, mount): run it with sudo"; exit 2; }
[ "$(uname -m)" = x86_64 ] || log "host is $(uname -m), not x86_64: the cross-compiler set-up assumes an x86-64 Debian/Ubuntu host"

# 1. host tools
need=()
for pkg in qemu-user-static binfmt-support debootstrap g++-aarch64-linux-gnu; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 ||
  { log "qemu-aarch64 is registered without the F flag: it cannot run inside a chroot"; exit 2; }

# 2. the arm64 userland
if [ ! -x "$ARM_ROOT/usr/bin/python3.11" ]; then
  log "debootstrap arm64 bookworm into $ARM_ROOT (a few minutes)"
  debootstrap --arch=arm64 --variant=minbase \
    --include=python3,python3-venv,python3-dev,g++,make,ca-certificates bookworm "$ARM_ROOT" "$ARM_MIRROR" >/dev/null
fi
cp /etc/resolv.conf "$ARM_ROOT/etc/resolv.conf"
# a TLS-intercepting proxy's CA (if the host trusts extra ones, pip in the chroot must too)
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$ARM_ROOT/usr/local/share/ca-certificates/"
  chroot "$ARM_ROOT" update-ca-certificates >/dev/null
fi

# mounts, undone on exit (lazily: an emulated process may still hold one for a moment)
MOUNTED=()
bind() {  # bind SRC DEST [ro]
  mkdir -p "$ARM_ROOT$2"
  # one left by a killed run is undone at this run's end too (a later `rm -rf` of ARM_ROOT would
  # otherwise delete through it into the host's /dev or /usr)
  MOUNTED=("$ARM_ROOT$2" "${MOUNTED[@]}")
  mountpoint -q "$ARM_ROOT$2" && return 0
  mount --bind "$1" "$ARM_ROOT$2"
  if [ "${3:-}" = ro ]; then mount -o remount,bind,ro "$ARM_ROOT$2"; fi
}
cleanup() { for m in "${MOUNTED[@]}"; do umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
bind /proc /proc
bind /dev /dev
bind /sys /sys
if [ "$ARM_CXX" = cross ]; then
  # The host's x86-64 cross compiler, run from inside the chroot: the host's /usr at /xusr (gcc finds
  # cc1plus, as and ld relative to itself), its libraries at their multiarch path (no clash with
  # aarch64-linux-gnu), its loader at /lib64, and /usr/aarch64-linux-gnu (the cross libc, whose libc.so
  # names absolute paths there) pointing into /xusr.
  bind /usr /xusr ro
  bind /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu ro
  mkdir -p "$ARM_ROOT/usr/lib64"
  ln -sfn /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$ARM_ROOT/usr/lib64/ld-linux-x86-64.so.2"
  [ -e "$ARM_ROOT/lib64" ] || ln -s usr/lib64 "$ARM_ROOT/lib64"
  ln -sfn /xusr/aarch64-linux-gnu "$ARM_ROOT/usr/aarch64-linux-gnu"
  BUILD_ENV="CC=/xusr/bin/aarch64-linux-gnu-gcc CXX=/xusr/bin/aarch64-linux-gnu-g++"
  BUILD_ENV+=" LDSHARED='/xusr/bin/aarch64-linux-gnu-g++ -shared'"
else
  BUILD_ENV=""
fi
in_arm() { chroot "$ARM_ROOT" /usr/bin/env -i HOME=/root PATH=$VENV/bin:/usr/bin:/bin LANG=C.UTF-8 \
  PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 \
  PYTHONDONTWRITEBYTECODE=1 /bin/bash -c "$1"; }

# 3. the venv
if [ ! -e "$ARM_ROOT$VENV/.deps-$ARM_TORCH" ]; then
  log "venv with $ARM_TORCH (a 100-200 MB download, minutes emulated)"
  in_arm "python3 -m venv $VENV && pip install -q --upgrade pip && pip install -q '$ARM_TORCH' numpy pytest \
    'setuptools>=77' wheel ninja h5py safetensors tqdm && touch '$VENV/.deps-$ARM_TORCH'"
fi

# 4. build
log "copying the checkout (tracked and untracked, not ignored files) to $ARM_ROOT/src and building (ARM_CXX=$ARM_CXX)"
rm -rf "$ARM_ROOT/src"
mkdir -p "$ARM_ROOT/src"
(cd "$ROOT_DIR" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$ARM_ROOT/src"
start=$(date +%s)
if ! in_arm "cd /src && export MAX_JOBS=2 $BUILD_ENV && python setup.py -q build_ext --inplace"; then
  log "FAILED: the build"
  exit 2
fi
log "built in $(( $(date +%s) - start )) s"

# 5. load check, then the tests
in_arm "cd /src && OMP_NUM_THREADS=6 python - <<'EOF'
import os, platform, torch
torch.set_num_threads(2)
from spacy_elmo.ops import fused_available
assert platform.machine() == 'aarch64', platform.machine()
assert fused_available(), 'the compiled extension does not load'
from spacy_elmo.ops import fused
torch.randn(1 << 22).exp()  # torch's own parallel_for: a team of torch.get_num_threads()
before = len(os.listdir('/proc/self/task'))
fused.highway(torch.randn(8192, 64), torch.randn(128, 64) * 0.1, torch.zeros(128))
added = len(os.listdir('/proc/self/task')) - before
gomps = sorted({line.split()[-1].split('/')[-1] for line in open('/proc/self/maps') if 'libgomp' in line})
print('[arm-check] machine', platform.machine(), '| torch', torch.__version__, '| fused_available True',
      '| cpu kernel table', fused.cpu_isa(), '| OpenMP runtimes', gomps, '| threads the kernel added', added)
assert fused.cpu_isa() == 'base', fused.cpu_isa()
# one OpenMP runtime, torch's: the kernels' teams follow torch.set_num_threads (2 here, not OMP_NUM_THREADS' 6)
assert len(gomps) == 1 and added == 0, (gomps, added)
EOF" || { log "FAILED: the load check"; exit 2; }
log "pytest $ARM_TESTS"
start=$(date +%s)
set +e
in_arm "cd /src && python -m pytest -q -p no:cacheprovider $ARM_TESTS"
status=$?
set -e
log "pytest exit status $status after $(( $(date +%s) - start )) s"
exit $status
