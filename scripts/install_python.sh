#!/usr/bin/env bash
# Installs the tessera Python package with Debian's pip: libtessera.so from the build folder
# copied into the package, then pip install of python/. Into the active virtual environment
# when there is one, else into the user's site-packages (~/.local).
# Usage: scripts/install_python.sh BUILD_DIR [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: install_python.sh BUILD_DIR [PYTHON]}
python=${2:-/usr/bin/python3}
if [ -n "${VIRTUAL_ENV:-}" ]; then python="$VIRTUAL_ENV/bin/python"; fi
install -m 755 "$build/libtessera.so" python/tessera/libtessera.so
# The image codecs it links, beside it (RUNPATH $ORIGIN): hosts with other sonames load these.
for codec in $(ldd "$build/libtessera.so" | awk '/libpng|libjpeg/ {print $3}'); do
  install -m 644 "$codec" python/tessera/
done
where=(--user --break-system-packages)
if [ -n "${VIRTUAL_ENV:-}" ]; then where=(); fi
"$python" -m pip install --quiet --no-deps --no-build-isolation --force-reinstall "${where[@]}" ./python
rm -rf python/build python/*.egg-info python/tessera/*.so*
echo "installed tessera $("$python" -c 'import tessera; print(tessera.version(), "from", tessera.library_path)')"
