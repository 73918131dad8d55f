# tests/cuda/toolkit.sh: sourced by the tier scripts. They run wherever the
# CUDA toolkit is installed and skip (exit 77) only where it is not.
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -d "$CUDA_HOME" ]; then
    echo "SKIP: no CUDA toolkit at $CUDA_HOME"
    exit 77
fi
