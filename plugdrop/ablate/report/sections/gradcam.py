"""Grad-CAM overlays of the first seed of each variant (plugdrop's trainer draws them; they
need the model)."""

from __future__ import annotations

from ..markup import e, img
from .base import Facts, Section

__all__ = ["GradCam"]


class GradCam(Section):
    name = "gradcam"

    def left_out(self) -> str:
        return "Grad-CAM: it needs the model, which is the program's"

    def html(self, f: Facts) -> list[str]:
        ab = f.ab
        names = {s.variant for s in f.shown}
        figs = []
        for v in ab.variants:
            if v not in names:
                continue
            run = next((r for r in ab.runs if r.variant == v and r.gradcam is not None), None)
            if run is None or run.gradcam is None:
                continue
            try:
                data = run.gradcam.read_bytes()
            except OSError:
                continue
            figs.append(f"<figure>{img(data, f'Grad-CAM of {v}')}<figcaption>{e(v)} "
                        f"(seed {run.seed})</figcaption></figure>")
        body = ('<div class="cams">' + "".join(figs) + "</div>" if figs else
                '<p class="note">No Grad-CAM images (gradcam: false, or no run finished '
                'yet).</p>')
        return ["<h2>Grad-CAM</h2>", body]
