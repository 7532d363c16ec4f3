#!/usr/bin/env bash
# The next embedded discrete model (issue 60) trained on a lent GPU, in device calls of about nine minutes:
# tiny-uncertain's data (every emoji in up to four designs, patch texture: each batch re-quantised at tau
# 1.5) and trainer (`python -m specviz.training.tiny`), for many times the CPU run's steps, at a size two CPU
# cores still run at AR <= 1.5 s per image: hidden 320, 6 layers (9.1M parameters, 18.3 MB), 1.38 s per
# image on the 2-core machine where tiny-uncertain (256, 6) takes 0.99 s (`python scripts/stage_cost.py
# --shape 256,8 --shape 320,6 --shape 384,4 --shape 384,6`: 1.28, 1.38, 1.28 and 1.80 s; docs/models.md).
#
# 1. Here, with the network and the text encoder: the designs and the caption vectors into .device/cache,
#    the vectors as a float16 copy (what a call carries is 64 MiB, tracked files included):
#        scripts/stage_on_gpu.sh pack
# 2. The call. The tracked assets (55 MB) leave the checkout meanwhile, so the data fits beside the code:
#        mv assets /tmp/assets-aside                                    # here, before it
#        run: bash scripts/stage_on_gpu.sh train   (carry [".device/cache"], timeout_s 590)
#        mv /tmp/assets-aside assets                                    # here, after it
#    MINUTES (8), HIDDEN (320), LAYERS (6), BATCH (256), LR (1e-3) and EVAL_EVERY (500) set it; STEPS
#    instead of MINUTES fixes the step count. It writes under $OUT the trainer's log as it goes and
#    stage.tar.* (the model folder as of its last evaluation: weights, codebook, config.json with the
#    training record, in parts of 15 MiB, a call returning files of at most 16 MiB), re-packed after every
#    evaluation, so a call cut off at its limit still brings back a whole model.
# 3. Here: unpack and look, before anything replaces a shipped model:
#        scripts/stage_on_gpu.sh unpack DIR_WITH_THE_PARTS /tmp/stage
#        python -m specviz.training.tiny_head --weights /tmp/stage --cache .device/cache   (the EAGLE head, CPU)
#        python -m specviz.stage.samples --weights /tmp/stage --out /tmp/stage/samples.png   (look at it)
#        python -m specviz.stage.targets --weights /tmp/stage   (issue 60's targets; on a quiet machine)
# 4. A later call continues it (a fresh warm-up and cosine schedule from the brought-back weights; Adam's
#    moments stay behind), with the folder copied to .device/stage here:
#        cp -r /tmp/stage .device/stage; mv assets /tmp/assets-aside
#        run: bash scripts/stage_on_gpu.sh continue   (carry [".device/cache", ".device/stage"], timeout_s 590)
#    at LR (default 5e-4 here) for MINUTES (8).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${CACHE:-.device/cache}
STAGE=${STAGE:-.device/stage}
WORK=${WORK:-.device/work} # ignored by git
TRAIN=(python -m specviz.training.tiny --cache "$CACHE")

# the model folder as of its last evaluation into $OUT, in parts a call returns
pack_model() {
    [[ -f $WORK/model/config.json ]] || return 0
    rm -f "$OUT"/stage.tar.*
    tar -cf - -C "$WORK" model | split -b 15m - "$OUT/stage.tar."
}

# the trainer with these arguments, its log in $OUT; the model re-packed whenever an evaluation rewrote it
train_and_pack() {
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$OUT/machine.log" 2>&1 || true
    local length=(--minutes "${MINUTES:-8}")
    [[ -n ${STEPS:-} ]] && length=(--steps "$STEPS")
    "${TRAIN[@]}" "${length[@]}" --batch-size "${BATCH:-256}" --eval-every "${EVAL_EVERY:-500}" \
        --device "${DEVICE:-cuda}" --out "$WORK/model" "$@" >"$OUT/train.log" 2>&1 &
    local trainer=$! status=0
    while kill -0 "$trainer" 2>/dev/null; do
        sleep "${POLL_SECONDS:-10}"
        if [[ -f $WORK/model/config.json && ( ! -f $OUT/stage.tar.aa || $WORK/model/config.json -nt $OUT/stage.tar.aa ) ]]; then
            pack_model
        fi
    done
    wait "$trainer" || status=$?
    pack_model
    return "$status"
}

case "${1:-}" in
pack)
    "${TRAIN[@]}" --prepare
    rm -f "$CACHE"/designs/*.tgz # the npm packages the designs were rendered from
    du -sh "$CACHE"
    ;;
train)
    : "${OUT:?the device call sets OUT}"
    [[ -f $CACHE/designs/designs.npz ]] || { echo "no $CACHE: run pack here and carry it" >&2; exit 3; }
    rm -rf "$WORK" && mkdir -p "$WORK"
    train_and_pack --hidden "${HIDDEN:-320}" --layers "${LAYERS:-6}" --lr "${LR:-1e-3}"
    ;;
continue)
    : "${OUT:?the device call sets OUT}"
    [[ -f $CACHE/designs/designs.npz ]] || { echo "no $CACHE: run pack here and carry it" >&2; exit 3; }
    [[ -f $STAGE/config.json ]] || { echo "no $STAGE: unpack the model here, copy it there and carry it" >&2; exit 3; }
    rm -rf "$WORK" && mkdir -p "$WORK"
    train_and_pack --init-from "$STAGE" --lr "${LR:-5e-4}"
    ;;
unpack)
    (($# == 3)) || { echo "usage: $0 unpack PARTS_DIR DEST" >&2; exit 2; }
    mkdir -p "$3"
    cat "$2"/stage.tar.* | tar -xf - -C "$3" --strip-components 1
    python -c "import json, sys; t = json.load(open(sys.argv[1]))['training']; \
print(f\"{t['device']}: {t['steps']} steps in {t['minutes']} min, kept {t['kept_checkpoint']}\")" "$3/config.json"
    ;;
*)
    echo "usage: $0 pack | train | continue | unpack PARTS_DIR DEST" >&2
    exit 2
    ;;
esac
