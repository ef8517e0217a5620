#!/usr/bin/env bash
# Installs tilegen's pinned AMD toolchain from Debian's packages, idempotently:
#   * hipcc 7.2.4 (clang 22) and the HIP headers, from Debian experimental;
#   * the composable_kernel (CK) headers (libcomposable-kernel-dev 7.2.4, under /usr/include/ck).
#
# They live in a Debian sid root (debootstrap --variant=minbase), one per pinned version set,
# in a per-user cache: ${TILEGEN_TOOLCHAIN_DIR:-$HOME/.cache/tilegen}/rocm-7.2.4-ck-7.2.4/
#   root/                       the sid root (0.9 GB on disk; a 360 MB download)
#   bin/tilegen-hipcc           hipcc, run inside the root (see below)
#   bin/tilegen-llvm-objdump    llvm-objdump of the same LLVM 22
#   bin/tilegen-clang-offload-bundler, bin/tilegen-rocm-run CMD ARGS... (any tool of the root)
#   versions.txt                every package of the root, with its version
# The install is built in <dir>.partial and renamed into place once whole, with a stamp file
# inside naming the pins; a rerun that finds the stamp prints the path and exits at once.
#
# The wrappers run the tool chrooted into the root, in a private mount namespace (nothing leaks
# onto the host) with /proc and /dev mounted and the host's /work, /tmp, $HOME and the current
# directory bind-mounted at the same paths, so absolute and relative paths under them just work
# (more folders: TILEGEN_ROCM_BIND=/a:/b). Root only: it uses debootstrap, chroot and mounts.
# tilegen-hipcc refuses to compile without an explicit --offload-arch=gfxNNN: hipcc would probe
# for a GPU, and there is none here.
#
# Prints, as its last line, the assignment other scripts can eval:
#   TILEGEN_HIPCC=<cache>/rocm-7.2.4-ck-7.2.4/bin/tilegen-hipcc
set -euo pipefail

# The pins: exact Debian versions. The top three are what we ask for; the rest fix the compiler
# and device libraries that decide the code hipcc emits.
ROCM_VERSION=7.2.4
CK_VERSION=7.2.4
PINS=(
  hipcc=7.2.4+dfsg-1~exp1
  libamdhip64-dev=7.2.4-1~exp2
  libcomposable-kernel-dev=7.2.4-1~exp1
  libamdhip64-7=7.2.4-1~exp2
  libamd-comgr3=7.2.4+dfsg-1~exp1
  rocm-device-libs-22=7.2.4+dfsg-1~exp1
  clang-22=1:22.1.8-3
  llvm-22=1:22.1.8-3
  lld-22=1:22.1.8-3
  libllvm22=1:22.1.8-3
)
MIRROR="${TILEGEN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

CACHE="${TILEGEN_TOOLCHAIN_DIR:-$HOME/.cache/tilegen}"
DIR="$CACHE/rocm-$ROCM_VERSION-ck-$CK_VERSION"
STAMP_TEXT="$(printf '%s\n' "${PINS[@]}")"

say() { echo "install-hip-toolchain: $*" >&2; }
die() { say "error: $*"; exit 1; }

# show_log LOG: the tail of a failed step's log, for the error that follows.
show_log() { tail -n 40 "$1" | sed 's/^/  | /' >&2; }

# in_root CMD...: runs CMD chrooted into the partial root, with /proc mounted, in a private
# mount namespace (so an interrupted run leaves no mount behind).
in_root() {
  unshare --mount --fork --propagation private /bin/sh -c '
    r=$1; shift
    mount -t proc proc "$r/proc" && mount --bind /dev "$r/dev" || exit 1
    exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      DEBIAN_FRONTEND=noninteractive "$@"' sh "$DIR.partial/root" "$@"
}

# begin: returns 1 when $DIR is already complete with these pins; otherwise starts $DIR.partial afresh.
# Until finish, a failed or interrupted run drops the partial root (keeping its logs); a run killed
# outright leaves $DIR.partial, which the next run removes.
begin() {
  if [[ -f "$DIR/.complete" && "$(cat "$DIR/.complete")" == "$STAMP_TEXT" ]]; then return 1; fi
  say "$1"
  rm -rf "$DIR" "$DIR.partial"
  mkdir -p "$DIR.partial/logs"
  trap 'rm -rf "$DIR.partial/root" "$DIR.partial/debootstrap"' EXIT
  trap 'exit 130' INT TERM
}

# finish: the install is whole; stamp it and move it into place.
finish() {
  printf '%s\n' "$STAMP_TEXT" >"$DIR.partial/.complete"
  mv "$DIR.partial" "$DIR"
  trap - EXIT INT TERM
}

# find_debootstrap: sets DEBOOTSTRAP (a command array): the host's, or the Debian package's
# script unpacked into $DIR.partial without installing it.
find_debootstrap() {
  if command -v debootstrap >/dev/null; then
    DEBOOTSTRAP=(debootstrap)
    return
  fi
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
    || die "debootstrap is not installed and there is no apt-get/dpkg-deb to fetch it"
  local d="$DIR.partial/debootstrap" log="$DIR.partial/logs/apt-download.log"
  mkdir -p "$d"
  if ! (cd "$d" && apt-get download debootstrap) >"$log" 2>&1; then
    say "apt-get download debootstrap failed; running apt-get update and retrying"
    (apt-get update && cd "$d" && apt-get download debootstrap) >>"$log" 2>&1 \
      || { show_log "$log"; die "could not fetch the debootstrap package with apt-get -- is Debian's archive reachable?"; }
  fi
  dpkg-deb -x "$d"/debootstrap_*.deb "$d/x"
  DEBOOTSTRAP=(env DEBOOTSTRAP_DIR="$d/x/usr/share/debootstrap" "$d/x/usr/sbin/debootstrap")
}

make_root() {
  local r="$DIR.partial/root" log="$DIR.partial/logs/debootstrap.log" keyring=()
  find_debootstrap
  [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] \
    && keyring=(--keyring=/usr/share/keyrings/debian-archive-keyring.gpg)
  say "debootstrap: a minimal Debian sid root from $MIRROR"
  "${DEBOOTSTRAP[@]}" --variant=minbase "${keyring[@]}" sid "$r" "$MIRROR" >"$log" 2>&1 \
    || { show_log "$log"; die "debootstrap of Debian sid from $MIRROR failed (log: $log)"; }
  rm -rf "$DIR.partial/debootstrap"

  echo "deb $MIRROR experimental main" >"$r/etc/apt/sources.list.d/experimental.list"
  # The archive's Release files carry a Valid-Until earlier than this machine's clock.
  echo 'Acquire::Check-Valid-Until "false";' >"$r/etc/apt/apt.conf.d/90tilegen"
  # Only CK's headers are needed: drop its 1.9 GB prebuilt convolution library, and the docs.
  cat >"$r/etc/dpkg/dpkg.cfg.d/90tilegen" <<'EOF'
path-exclude=/usr/lib/x86_64-linux-gnu/libdevice_conv_operations.a
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/locale/*
EOF
  cp /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true

  log="$DIR.partial/logs/apt.log"
  say "apt-get install ${PINS[*]} (about 360 MB download)"
  in_root apt-get update >"$log" 2>&1 \
    || { show_log "$log"; die "apt-get update inside the sid root failed -- is $MIRROR reachable?"; }
  local pin
  for pin in "${PINS[@]}"; do
    # apt-cache show PKG=VER exits 0 even when VER is gone; madison lists what the archive has.
    in_root apt-cache madison "${pin%%=*}" | awk -F'|' '{ gsub(/ /, "", $2); print $2 }' | grep -xF -- "${pin#*=}" >/dev/null \
      || die "pinned package ${pin%%=*} version ${pin#*=} is no longer fetchable from $MIRROR (sid/experimental); update the pins in $0"
  done
  in_root apt-get install -y --no-install-recommends -o Dpkg::Use-Pty=0 -t experimental "${PINS[@]}" >>"$log" 2>&1 \
    || { show_log "$log"; die "apt-get install of the pinned packages failed (log: $log)"; }
  in_root apt-get clean
  rm -rf "$r"/var/lib/apt/lists/* "$r/etc/resolv.conf"
  in_root dpkg-query -W -f '${Package}=${Version}\n' >"$DIR.partial/versions.txt"
  [[ -x "$r/usr/bin/hipcc" && -f "$r/usr/include/ck/ck.hpp" ]] || die "hipcc or ck/ck.hpp missing after the install"
}

write_wrappers() {
  local bin="$DIR.partial/bin"
  mkdir -p "$bin"
  cat >"$bin/tilegen-rocm-run" <<'EOF'
#!/usr/bin/env bash
# tilegen-rocm-run CMD ARGS...: runs CMD inside this toolchain's Debian root, in the current
# directory, with /work, /tmp, $HOME, the current directory and $TILEGEN_ROCM_BIND (colon-separated)
# bind-mounted at their own paths. Made by scripts/install-hip-toolchain.sh.
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
root="$(dirname "$here")/root"
[[ $# -ge 1 ]] || { echo "usage: tilegen-rocm-run CMD [ARGS...]" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "tilegen-rocm-run: must run as root (it uses unshare, mount and chroot)" >&2; exit 1; }
binds=/work:/tmp:${HOME:-}:$PWD:${TILEGEN_ROCM_BIND:-}
exec unshare --mount --fork --propagation private /bin/bash -c '
  set -e
  root=$1 binds=$2 cwd=$3; shift 3
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  done_=()
  IFS=: read -r -a list <<<"$binds"
  for b in "${list[@]}"; do
    [[ -n $b && $b == /* && $b != / && -d $b ]] || continue
    b=$(readlink -f "$b")
    case $b/ in "$root"/*) continue ;; esac
    skip=
    for d in "${done_[@]}"; do case $b/ in "$d"/*) skip=1 ;; esac; done
    [[ -z $skip ]] || continue
    mkdir -p "$root$b"
    mount --rbind "$b" "$root$b"
    done_+=("$b")
  done
  env=(PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="${HOME:-/root}" LANG=C.UTF-8 TMPDIR="${TMPDIR:-/tmp}")
  while IFS= read -r v; do env+=("$v"); done < <(env | grep -E "^HIPCC_[A-Z_]*=" || true)
  exec chroot "$root" /usr/bin/env -i "${env[@]}" /bin/sh -c "cd \"\$1\" && shift && exec \"\$@\"" sh "$cwd" "$@"
' tilegen-rocm-run "$root" "$binds" "$PWD" "$@"
EOF
  cat >"$bin/tilegen-hipcc" <<'EOF'
#!/usr/bin/env bash
# hipcc 7.2.4 of tilegen's AMD toolchain; see tilegen-rocm-run. Needs an explicit --offload-arch.
set -euo pipefail
compiles= arch=
for a in "$@"; do
  case $a in
    -c | -S | -E | *.hip | *.cpp | *.cc | *.cu) compiles=1 ;;
    --offload-arch=* | --offload-arch | --cuda-gpu-arch=* | --offload-host-only | --cuda-host-only) arch=1 ;;
  esac
done
if [[ -n $compiles && -z $arch ]]; then
  echo "tilegen-hipcc: pass --offload-arch=gfxNNN explicitly (e.g. gfx942); without it hipcc probes for a GPU" >&2
  exit 2
fi
exec "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/tilegen-rocm-run" hipcc "$@"
EOF
  local tool
  for tool in llvm-objdump clang-offload-bundler llvm-readelf llvm-objcopy; do
    printf '#!/bin/sh\n# %s of the LLVM 22 in tilegen'"'"'s AMD toolchain; see tilegen-rocm-run.\nexec "$(dirname "$(readlink -f "$0")")/tilegen-rocm-run" /usr/lib/llvm-22/bin/%s "$@"\n' \
      "$tool" "$tool" >"$bin/tilegen-$tool"
  done
  chmod +x "$bin"/*
}

# smoke_test: one kernel compiled for gfx942 through the wrapper, from the partial dir.
smoke_test() {
  local t
  t="$(mktemp -d /tmp/tilegen-hip-smoke.XXXXXX)"
  printf '%s\n' '#include <hip/hip_runtime.h>' \
    '__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }' >"$t/k.hip"
  if ! (cd "$t" && "$DIR.partial/bin/tilegen-hipcc" -O3 --offload-arch=gfx942 -c k.hip -o k.o) >"$t/log" 2>&1 \
    || [[ ! -s "$t/k.o" ]]; then
    show_log "$t/log"
    rm -rf "$t"
    die "the smoke test (tilegen-hipcc --offload-arch=gfx942 -c) failed"
  fi
  rm -rf "$t"
}

[[ $(id -u) -eq 0 ]] || die "must run as root: it uses debootstrap, chroot, unshare and mount"
for tool in unshare chroot mount flock; do
  command -v "$tool" >/dev/null || die "$tool not found (util-linux / coreutils)"
done
mkdir -p "$CACHE"
exec 9>"$CACHE/.rocm-install.lock"
flock 9
if begin "installing hipcc $ROCM_VERSION + composable_kernel $CK_VERSION into $DIR (about 360 MB download, 0.9 GB on disk)"; then
  make_root
  write_wrappers
  smoke_test
  finish
  "$DIR/bin/tilegen-hipcc" --version | head -2 >&2
fi
echo "TILEGEN_HIPCC=$DIR/bin/tilegen-hipcc"
