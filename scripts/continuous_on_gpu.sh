#!/usr/bin/env bash
# The continuous pair (issue 35) trained on a lent GPU in one device call of about nine minutes:
# the target and a data-only draft side by side, then the draft distilled from that target.
#
# 1. Here, with the network and the text encoder: build the designs and the caption vectors into
#    .device/cache, the vectors as a float16 copy (what a call carries is 64 MiB, tracked files included):
#        scripts/continuous_on_gpu.sh pack
# 2. The call. The tracked assets (55 MB) leave the checkout meanwhile, so the data fits beside the code:
#        mv assets /tmp/assets-aside                                             # here, before it
#        run: bash scripts/continuous_on_gpu.sh train   (carry [".device/cache"], timeout_s 590)
#        mv /tmp/assets-aside assets                                             # here, after it
#    TARGET_MINUTES (4.5), DISTIL_MINUTES (3), BATCH (256) and DISTIL_BATCH (64) set its length and size.
#    With device time left, a second call at once (the machine stays warm 30 s and keeps ignored folders)
#    continues the distillation at half the learning rate, carrying nothing (the assets are back by then):
#        run: DISTIL_MINUTES=M bash scripts/continuous_on_gpu.sh more   (M about budget_left_s / 60 - 1)
#    It writes under $OUT: each run's log (as it goes, so a cut-off call still returns them) and
#    pair.tar.* (the target, the data-only draft, the distilled draft and their summaries, in parts of
#    15 MiB: a call returns files of at most 16 MiB).
#    Or, to train the shipped pair further (its target was still improving when its GPU time ran out):
#    the data and the shipped pair (27 MB of target) do not fit one call, so a first call leaves the data on
#    the machine (it keeps carried folders while warm) and the second brings the pair (`pack` copied it to
#    .device/shipped), with the assets moved aside as above:
#        run: true   (carry [".device/cache"], timeout_s 60)
#        run: bash scripts/continuous_on_gpu.sh continue   (carry [".device/shipped"], timeout_s 590)
#    trains the shipped target for TARGET_MINUTES (7.5) more at a peak learning rate of TARGET_LR (5e-4)
#    (a fresh warm-up and cosine schedule; Adam's moments are not shipped), and puts the shipped draft
#    beside it, so that `more` then distils that draft towards the new target.
# 3. Here: unpack and look, before anything replaces the shipped pair:
#        scripts/continuous_on_gpu.sh unpack DIR_WITH_THE_PARTS /tmp/pair
#        python -m specviz.stage.continuous_samples --weights /tmp/pair --out /tmp/pair
#        python -m specviz.stage.recognition --weights /tmp/pair
#        python -m specviz bench-cspd ...   (docs/measurements/cspd.md; with the pair in assets/tiny-continuous)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=.device/cache
SHIPPED=.device/shipped
TRAIN="python -m specviz.training.tiny_continuous --cache $CACHE"
WORK=.device/work  # ignored, so a second call on the still-warm machine finds it
# the pair so far into $OUT, after each stage as well as on exit (a call killed at its limit runs no trap)
tar_pair() {
    rm -f "$OUT"/pair.tar.*
    tar -cf - -C "$WORK" --exclude ./more . | split -b 15m - "$OUT/pair.tar."
}

case "${1:-}" in
pack)
    $TRAIN --role target --prepare
    rm -f "$CACHE"/designs/*.tgz  # the npm packages the designs were rendered from
    rm -rf "$SHIPPED" && mkdir -p "$SHIPPED"  # the shipped pair, for `continue`
    cp assets/tiny-continuous/{target,draft}.{json,safetensors} assets/tiny-continuous/projection.safetensors "$SHIPPED"
    du -sh "$SHIPPED"
    du -sh "$CACHE"
    ;;
train)
    : "${OUT:?the device call sets OUT}"
    rm -rf "$WORK" && mkdir -p "$WORK"
    trap tar_pair EXIT  # what was trained comes back even when a later run fails
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$OUT/machine.log" 2>&1 || true
    common=(--batch-size "${BATCH:-256}" --lr 1e-3 --minutes "${TARGET_MINUTES:-4.5}" --eval-every 500)
    $TRAIN --role target "${common[@]}" --out "$WORK/target" >"$OUT/target.log" 2>&1 &
    target=$!
    $TRAIN --role draft "${common[@]}" --out "$WORK/draft" >"$OUT/draft.log" 2>&1 &
    draft=$!
    status=0
    wait "$target" || status=$?
    wait "$draft" || status=$?  # both finish before anything is packed or distilled
    ((status == 0)) || exit "$status"
    tar_pair
    $TRAIN --role draft --init-from "$WORK/draft" --distil-from "$WORK/target" --batch-size "${DISTIL_BATCH:-64}" \
        --lr 3e-4 --minutes "${DISTIL_MINUTES:-3}" --eval-every 200 --out "$WORK/distilled" >"$OUT/distil.log" 2>&1
    ;;
continue)
    : "${OUT:?the device call sets OUT}"
    [[ -f $CACHE/designs/designs.npz ]] || { echo "no $CACHE on this machine: carry it in a call first" >&2; exit 3; }
    [[ -f $SHIPPED/target.json ]] || { echo "no $SHIPPED: run pack here and carry it" >&2; exit 3; }
    rm -rf "$WORK" && mkdir -p "$WORK/distilled"
    trap tar_pair EXIT
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$OUT/machine.log" 2>&1 || true
    cp "$SHIPPED"/draft.* "$SHIPPED"/projection.safetensors "$WORK/distilled/"
    $TRAIN --role target --init-from "$SHIPPED" --batch-size "${BATCH:-256}" --lr "${TARGET_LR:-5e-4}" \
        --minutes "${TARGET_MINUTES:-7.5}" --eval-every 500 --out "$WORK/target" >"$OUT/target.log" 2>&1
    ;;
more)
    : "${OUT:?the device call sets OUT}"
    if [[ ! -f $WORK/target/target.json || ! -f $WORK/distilled/draft.json ]]; then
        echo "no earlier train on this machine: a machine that went back starts bare" >&2
        exit 3
    fi
    trap tar_pair EXIT
    $TRAIN --role draft --init-from "$WORK/distilled" --distil-from "$WORK/target" --batch-size "${DISTIL_BATCH:-64}" \
        --lr 1.5e-4 --minutes "${DISTIL_MINUTES:-3}" --eval-every 200 --out "$WORK/more" >"$OUT/distil-more.log" 2>&1
    mv "$WORK/distilled" "$WORK/before-more" && mv "$WORK/more" "$WORK/distilled" && rm -rf "$WORK/before-more"
    ;;
unpack)
    (($# == 3)) || { echo "usage: $0 unpack PARTS_DIR DEST (paths from the checkout's root)" >&2; exit 2; }
    mkdir -p "$3"
    cat "$2"/pair.tar.* | tar -xf - -C "$3"
    cmp "$3/target/projection.safetensors" "$3/distilled/projection.safetensors"  # one token space
    cp "$3/target/target."* "$3/distilled/"
    echo "the pair is $3/distilled (target and distilled draft); the data-only draft (after train) is in $3/draft"
    ;;
*)
    echo "usage: $0 pack | train | continue | more | unpack PARTS_DIR DEST" >&2
    exit 2
    ;;
esac
