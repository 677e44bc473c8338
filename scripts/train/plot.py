#!/usr/bin/env python3
"""Loss curves of a drafter training run (train.py's train_log.json) as one PNG.

  python scripts/train/plot.py ckpt/train_log.json docs/drafter-training-smollm2.png [GPU]

GPU names the card in the title (run_h200.sh passes nvidia-smi's name; default "one GPU").
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src, dst = sys.argv[1], sys.argv[2]
    gpu = sys.argv[3] if len(sys.argv) > 3 else "one GPU"
    d = json.load(open(src))
    log = d["log"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    new = any("dflash16_loss" in r for r in log)
    for key, label in [("dflash_loss", "DFlash b16: weighted CE"),
                       ("dspark_loss", "DSpark b7: distillation + L1" if new else "DSpark b7: 0.1 CE + 0.9 L1"),
                       ("dspark_ce", "DSpark b7: weighted CE"), ("dspark_conf_bce", "DSpark b7: confidence BCE"),
                       ("dflash16_loss", "DFlash at block 16: distillation"),
                       ("dflash8_loss", "DFlash at block 8: distillation"),
                       ("dspark_l1", "DSpark b7: L1(p_draft - p_target)")]:
        if any(key in r for r in log):
            ax[0].plot([r["step"] for r in log if key in r], [r[key] for r in log if key in r], label=label)
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("training loss")
    ax[0].set_yscale("log")
    ax[0].legend()
    for key, label in [("dflash_tau", "DFlash b16"), ("dflash16_tau", "DFlash b16"), ("dflash8_tau", "DFlash b8"),
                       ("dspark_tau", "DSpark b7")]:
        if any(key in r for r in log):
            ax[1].plot([r["step"] for r in log if key in r], [r[key] for r in log if key in r], label=label)
    val = d.get("val") or []
    for key, label in [("val_dflash16_tau", "DFlash b16, validation"), ("val_dflash8_tau", "DFlash b8, validation"),
                       ("val_dspark_tau", "DSpark b7, validation")]:
        if any(key in r for r in val):
            ax[1].plot([r["step"] for r in val if key in r], [r[key] for r in val if key in r], "o--", label=label)
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("accepted + 1 at random anchors")
    ax[1].set_title("lines: training batches; dots: held-back validation sequences" if val else "training batches",
                    fontsize=9)
    ax[1].legend()
    s = d["summary"]
    fig.suptitle(f"SmolLM2-135M drafters: {s['steps']} steps, {s['epochs']:.1f} epochs of {s['sequences']} "
                 f"sequences, {s['train_seconds']:.0f} s on {gpu}")
    fig.tight_layout()
    fig.savefig(dst, dpi=90)


if __name__ == "__main__":
    main()
