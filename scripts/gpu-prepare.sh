#!/usr/bin/env bash
# Prepares .gpu/, what scripts/gpu-check.sh needs on a lent GPU machine and cannot get
# there (docs/GPU.md). Run it here, on a development machine (Debian 12, with the
# packages of scripts/debian-packages.txt and the CUDA toolkit), from any directory:
#
#   scripts/gpu-prepare.sh              # builds the *_cuda_tests (release preset, build/)
#                                       # and fills .gpu/
#   scripts/gpu-prepare.sh --simulate   # then rehearses the device's part of
#                                       # scripts/gpu-check.sh here (below)
#
# The GPU machine has a compiler, CMake, ninja, nvcc and a python3 with PyTorch, but
# none of our Debian packages, and nothing can be installed there. So .gpu/ holds:
#   sysroot/usr/...  the files of the -dev packages the build finds (headers, CMake and
#                    pkg-config files, the shared libraries behind them; GoogleTest's
#                    static ones), copied from this machine's installed packages (dpkg -L),
#                    and the shared libraries those load that a bare Ubuntu lacks (LAPACK,
#                    BLAS, gfortran, quadmath: found with ldd). Not carried, because every
#                    Debian or Ubuntu system has them (dpkg itself needs libz and libbz2):
#                    glibc's libraries, libstdc++, libgcc_s, libz and libbz2; for linking,
#                    the sysroot has libz.so and libbz2.so, which the loader never opens.
#                    The .pc files name their prefix relative to themselves (${pcfiledir}),
#                    and the CMake package files compute theirs, so the folder works from
#                    wherever the working tree lands.
#   bin/pkg-config   pkgconf (with its libpkgconf) behind a wrapper that reads only the
#                    sysroot's .pc files: CBC is found through pkg-config (cmake/FindCbc.cmake)
#   tests/           the *_cuda_tests binaries (one per layer with tests/<layer>/*_cuda_test.cc).
#                    The CUDA backend is plain C++ against the CUDA runtime API (no kernels,
#                    so no GPU architecture to pick): they run on any GPU the driver supports.
#   cudart/          the libcudart.so they were linked with, the last place they look
#   MANIFEST.txt     the commit, the fingerprint of the C++ sources (gpu-check.sh
#                    --fingerprint), the packages and versions, the newest glibc and
#                    libstdc++ symbol versions the carried binaries and libraries need, and
#                    the size
# It stays well under 40 MiB (checked below); the device tool carries at most 64 MiB.
#
# --simulate runs scripts/gpu-check.sh with GPU_CHECK_FORCE=1 in a private mount
# namespace (unshare -m, as root) in which every file of the packages above, and the
# pkg-config binary, is covered by /dev/null: the configure step must find everything
# in .gpu/, the compiler and linker must take it from there, and the Python tests must
# load the carried libraries, or the build or the tests fail. It writes to
# /tmp/hyperoffload-gpu-sim/out and takes several minutes on two cores.
#
# Environment: JOBS (2), GPU_CHECK_DIR (.gpu).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
GPU_DIR=${GPU_CHECK_DIR:-$REPO/.gpu}
JOBS=${JOBS:-2}
ARCH=x86_64-linux-gnu
MAX_MIB=40
SIMULATE=0
case ${1:-} in
  "") ;;
  --simulate) SIMULATE=1 ;;
  *) echo "usage: scripts/gpu-prepare.sh [--simulate]" >&2; exit 2 ;;
esac

die() { echo "gpu-prepare: $*" >&2; exit 1; }

# The -dev packages the device build finds (cmake/HyperoffloadDependencies.cmake, with
# HYPEROFFLOAD_BUILD_TESTS for the *_cuda_tests and without the benchmarks), and the
# packages of the shared libraries behind them.
DEV_PACKAGES=(libfmt-dev libsimdjson-dev nlohmann-json3-dev libcli11-dev
              coinor-libcbc-dev coinor-libcgl-dev coinor-libclp-dev coinor-libosi-dev coinor-libcoinutils-dev
              libgtest-dev libgmock-dev)
LIB_PACKAGES=(libfmt9 libsimdjson14 coinor-libcbc3 coinor-libcgl1 coinor-libclp1 coinor-libosi1v5 coinor-libcoinutils3v5)
# Libraries every Debian or Ubuntu system has: never carried.
BASE_LIBS='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libz\.so|libbz2\.so)'

for tool in dpkg-query ldd objdump cmake unshare; do
  command -v "$tool" >/dev/null || die "$tool is missing"
done
for p in "${DEV_PACKAGES[@]}" "${LIB_PACKAGES[@]}" pkgconf-bin libpkgconf3; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    die "Debian package $p is not installed (scripts/install-deps.sh installs the build's packages)"
done

# ---- the carried binaries: built here ----------------------------------------------
mapfile -t CUDA_TARGETS < <(for f in tests/*/*_cuda_test.cc; do basename "$(dirname "$f")"; done | sort -u | sed 's/$/_cuda_tests/')
((${#CUDA_TARGETS[@]} > 0)) || die "no tests/*/*_cuda_test.cc"
[[ -f build/CMakeCache.txt ]] || cmake --preset release > /dev/null
grep -q 'CUDA backend enabled' <(cmake --preset release 2>&1) ||
  die "the release build did not find the CUDA toolkit (/usr/local/cuda): no *_cuda_tests to carry"
echo "gpu-prepare: building ${CUDA_TARGETS[*]} (release preset, build/)"
cmake --build --preset release -j "$JOBS" --target "${CUDA_TARGETS[@]}" > /tmp/gpu-prepare-build.log 2>&1 ||
  { tail -30 /tmp/gpu-prepare-build.log; die "the build failed (/tmp/gpu-prepare-build.log)"; }

rm -rf "$GPU_DIR"
mkdir -p "$GPU_DIR"/{sysroot,bin,tests,cudart,pkgconf-lib}
SYSROOT=$GPU_DIR/sysroot
LIBDIR=$SYSROOT/usr/lib/$ARCH
for t in "${CUDA_TARGETS[@]}"; do
  cp build/bin/"$t" "$GPU_DIR/tests/"
done

# ---- the sysroot ----------------------------------------------------------------------
# A package's files where a build looks: headers, libraries (static ones only for
# GoogleTest, which has no shared ones), CMake and pkg-config files. /lib/... is
# /usr/lib/... (merged /usr).
keep_path() {
  case $1 in
    /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | /usr/src/*) return 1 ;;
    *.a) [[ $1 == */libgtest*.a || $1 == */libgmock*.a ]] ;;
    /usr/include/* | /usr/lib/$ARCH/* | /usr/share/cmake/* | /usr/lib/cmake/* | /usr/share/pkgconfig/*) return 0 ;;
    *) return 1 ;;
  esac
}
for p in "${DEV_PACKAGES[@]}" "${LIB_PACKAGES[@]}"; do
  while read -r f; do
    f=${f/#\/lib\//\/usr\/lib\/}
    [[ -f $f || -L $f ]] && [[ ! -d $f ]] || continue
    keep_path "$f" || continue
    mkdir -p "$SYSROOT$(dirname "$f")"
    cp -P "$f" "$SYSROOT$f"
  done < <(dpkg -L "$p")
done

# The shared libraries that the carried binaries and the sysroot's libraries load,
# beyond the base ones, by the name the loader asks for (ldd resolves it here).
# libcudart goes to cudart/.
closure_pass() {
  local changed=0 f name path
  while read -r f; do
    while read -r name path; do
      [[ $name =~ $BASE_LIBS ]] && continue
      if [[ $name == libcudart.so* ]]; then
        [[ -e $GPU_DIR/cudart/$name ]] || { cp -L "$path" "$GPU_DIR/cudart/$name"; changed=1; }
        continue
      fi
      [[ -e $LIBDIR/$name ]] && continue
      [[ -f $path ]] || die "ldd found no $name for $f"
      cp -L "$path" "$LIBDIR/$name"
      changed=1
    done < <(ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
  done < <(find "$GPU_DIR/tests" "$LIBDIR" -maxdepth 1 -type f \( -name '*_cuda_tests' -o -name '*.so*' \))
  return $((1 - changed))
}
while closure_pass; do :; done

# pkg-config's -l flags need lib<name>.so for the linker: for the carried LAPACK and
# BLAS, a link to the library; for libz and libbz2, a copy named lib<name>.so, which the
# linker reads for its soname and the loader never opens (it asks for libz.so.1, the
# device's own).
ln -sf liblapack.so.3 "$LIBDIR/liblapack.so"
ln -sf libblas.so.3 "$LIBDIR/libblas.so"
cp -L "/usr/lib/$ARCH/libz.so.1" "$LIBDIR/libz.so"
cp -L "/usr/lib/$ARCH/libbz2.so.1.0" "$LIBDIR/libbz2.so"

# Links that point out of the sysroot (Debian's alternatives) or nowhere: fail loudly.
while read -r link; do
  target=$(readlink "$link")
  [[ $target != /* && -e $link ]] || die "$link -> $target leaves the sysroot"
done < <(find "$SYSROOT" -type l)

# Relocatable .pc files: the prefix relative to the file itself.
for pc in "$LIBDIR"/pkgconfig/*.pc; do
  sed -i -E 's#^([A-Za-z_]+)=/usr(/|$)#\1=${pcfiledir}/../../..\2#; s#-I/usr/include#-I${pcfiledir}/../../../include#g' "$pc"
done
for pc in "$SYSROOT"/usr/share/pkgconfig/*.pc; do
  [[ -e $pc ]] || continue
  sed -i -E 's#^([A-Za-z_]+)=/usr(/|$)#\1=${pcfiledir}/../..\2#; s#-I/usr/include#-I${pcfiledir}/../../include#g' "$pc"
done
if grep -l -E '(=|-I|-L)/usr' "$LIBDIR"/pkgconfig/*.pc "$SYSROOT"/usr/share/pkgconfig/*.pc 2>/dev/null; then
  die "the .pc files above still name /usr"
fi

# pkgconf, reading only the sysroot's .pc files.
cp -L /usr/bin/pkgconf "$GPU_DIR/bin/pkgconf"
cp -L "/usr/lib/$ARCH/libpkgconf.so.3" "$GPU_DIR/pkgconf-lib/"
cat > "$GPU_DIR/bin/pkg-config" <<'EOF'
#!/bin/sh
# pkgconf from .gpu (scripts/gpu-prepare.sh): only .gpu/sysroot's .pc files.
here=$(cd "$(dirname "$0")" && pwd)
sysroot=$here/../sysroot
PKG_CONFIG_LIBDIR="$sysroot/usr/lib/x86_64-linux-gnu/pkgconfig:$sysroot/usr/share/pkgconfig"
PKG_CONFIG_PATH=""
LD_LIBRARY_PATH="$here/../pkgconf-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_LIBDIR PKG_CONFIG_PATH LD_LIBRARY_PATH
exec "$here/pkgconf" "$@"
EOF
chmod +x "$GPU_DIR/bin/pkg-config"

# Every -l of CBC's pkg-config flags has its library in the sysroot (or is glibc's).
libs=$("$GPU_DIR/bin/pkg-config" --libs cbc) || die "the carried pkg-config cannot read cbc.pc"
for flag in $libs; do
  case $flag in
    -l*) name=${flag#-l}
         case $name in pthread | rt | m | dl) continue ;; esac
         [[ -e $LIBDIR/lib$name.so ]] || die "pkg-config --libs cbc names -l$name, which $LIBDIR lacks" ;;
    -L*) [[ -d ${flag#-L} ]] || die "pkg-config --libs cbc names ${flag}, which does not exist" ;;
  esac
done

# ---- checks and the manifest ---------------------------------------------------------------
# The carried binaries load with the carried libraries alone (plus the base ones) and run
# (their tests skip without a GPU).
for t in "${CUDA_TARGETS[@]}"; do
  missing=$(env -i LD_LIBRARY_PATH="$LIBDIR:$GPU_DIR/cudart" ldd "$GPU_DIR/tests/$t" |
            awk '/not found/ {print $1}')
  [[ -z $missing ]] || die "$t: not found with the carried libraries: $missing"
  outside=$(env -i LD_LIBRARY_PATH="$LIBDIR:$GPU_DIR/cudart" ldd "$GPU_DIR/tests/$t" |
            awk '$2 == "=>" {print $1, $3}' | grep -v -E "$BASE_LIBS" | grep -v "$GPU_DIR" || true)
  [[ -z $outside ]] || die "$t loads libraries from outside .gpu that a bare machine may lack: $outside"
  LD_LIBRARY_PATH="$LIBDIR:$GPU_DIR/cudart" "$GPU_DIR/tests/$t" --gtest_brief=1 > /dev/null ||
    die "$t does not run with the carried libraries"
done

newest() {  # newest symbol version of prefix $1 that the carried ELF files need
  find "$GPU_DIR" -type f \( -name '*.so*' -o -name '*_cuda_tests' -o -name pkgconf \) -print0 |
    xargs -0 objdump -T 2>/dev/null | grep -o "$1_[0-9][0-9.]*" | sort -u -V | tail -1
}
size_kib=$(du -sk "$GPU_DIR" | cut -f1)
((size_kib <= MAX_MIB * 1024)) || die ".gpu is $((size_kib / 1024)) MiB, over $MAX_MIB MiB"
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- CMakeLists.txt cmake src tests 2>/dev/null || commit+=" with uncommitted changes"
{
  echo "prepared: $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), g++ $(g++ -dumpfullversion)"
  echo "commit: $commit"
  echo "sources: $(scripts/gpu-check.sh --fingerprint) (scripts/gpu-check.sh --fingerprint)"
  echo "carried tests: ${CUDA_TARGETS[*]}"
  echo "cudart: $(ls "$GPU_DIR/cudart" | tr '\n' ' ')"
  echo "needs at least: $(newest GLIBC), $(newest GLIBCXX)"
  echo "size: $((size_kib / 1024)) MiB ($size_kib KiB)"
  echo "packages:"
  for p in "${DEV_PACKAGES[@]}" "${LIB_PACKAGES[@]}" pkgconf-bin libpkgconf3; do
    echo "  $p $(dpkg-query -W -f='${Version}' "$p")"
  done
  echo "libraries from ldd: $(cd "$LIBDIR" && ls liblapack.so.3 libblas.so.3 libgfortran.so.5 libquadmath.so.0 2>/dev/null | tr '\n' ' ')"
} > "$GPU_DIR/MANIFEST.txt"
cat "$GPU_DIR/MANIFEST.txt"
echo "gpu-prepare: $GPU_DIR is ready: carry .gpu along with the working tree"

((SIMULATE)) || exit 0

# ---- --simulate: the device's part of the check, here, with the packages hidden ------------
SIM=/tmp/hyperoffload-gpu-sim
rm -rf "$SIM"
mkdir -p "$SIM"
hide=$SIM/hide.txt
{
  for p in "${DEV_PACKAGES[@]}" "${LIB_PACKAGES[@]}" pkgconf-bin libpkgconf3; do
    dpkg -L "$p" | while read -r f; do
      if [[ -f $f && ! -L $f ]]; then echo "$f"; fi
    done
  done
  # The libraries ldd added, through Debian's alternatives links.
  for name in liblapack.so.3 libblas.so.3 libgfortran.so.5 libquadmath.so.0; do
    readlink -f "/usr/lib/$ARCH/$name"
  done
  for name in liblapack.so libblas.so; do
    if [[ -e /usr/lib/$ARCH/$name ]]; then readlink -f "/usr/lib/$ARCH/$name"; fi
  done
} | grep -v -E '^/usr/share/(doc|man|lintian)/' | sort -u > "$hide"
echo "gpu-prepare --simulate: hiding $(wc -l < "$hide") files of the carried packages; build in $SIM/build"
set +e
unshare -m --propagation private bash -c '
  set -e
  while read -r f; do mount --bind /dev/null "$f"; done < "$1"
  # Nothing of the hidden packages is visible: a build that uses one fails.
  if printf "#include <fmt/core.h>\nint main() { return fmt::format(\"{}\", 1).size(); }\n" |
      g++ -std=c++20 -x c++ -fsyntax-only - 2>/dev/null; then
    echo "fmt is still visible" >&2; exit 3
  fi
  OUT=$2/out GPU_CHECK_BUILD_DIR=$2/build GPU_CHECK_FORCE=1 GPU_CHECK_DEADLINE_S=3000 GPU_CHECK_BUILD_LIMIT_S=2400 \
    GPU_CHECK_JOBS=$3 scripts/gpu-check.sh
' simulate "$hide" "$SIM" "$JOBS"
rc=$?
set -e
summary=$SIM/out/gpu-check.txt
grep -q -E '^build +PASS ' "$summary" || die "--simulate: the build did not pass ($summary)"
grep -q -E '^cuda-tests-device +(PASS|SKIP) +[0-9]+ +0 passed, 0 failed, [1-9][0-9]* skipped' "$summary" ||
  die "--simulate: the device-built CUDA tests did not run ($summary)"
grep -q -E '^python +(PASS|SKIP) +[0-9]+ +[1-9][0-9]* passed, 0 failed' "$summary" ||
  die "--simulate: the Python tests did not pass ($summary)"
echo "gpu-prepare --simulate: the device build and tests passed with only .gpu (gpu-check.sh exit $rc)"
