#!/bin/sh
# Installs an optimized CBLAS for MLX's CPU build where it can; MLX's bundled
# reference BLAS is several times slower for the float32 matmuls of decoding.
[ "$(uname -s)" = "Linux" ] || exit 0
for lib in /usr/lib/*/openblas-pthread/libblas.so.3 /usr/lib/*/libopenblas.so.0; do
    [ -e "$lib" ] && exit 0
done
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing OpenBLAS (libopenblas0-pthread) for fast CPU matmuls..."
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1; } ||
        echo "notice: could not install libopenblas0-pthread; mlxchat will run on MLX's slow reference BLAS."
else
    echo "notice: no optimized BLAS found. For several times faster decoding on the CPU, run:"
    echo "    sudo apt-get install libopenblas0-pthread    (Debian/Ubuntu)"
    echo "or install Intel MKL into this environment:  .venv/bin/pip install mkl"
fi
exit 0
