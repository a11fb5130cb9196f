"""plugdrop in the trainers users already have: a callback for PyTorch Lightning
(:mod:`plugdrop.integrations.lightning`) and one for the Hugging Face ``Trainer``
(:mod:`plugdrop.integrations.transformers`). Each attaches an attachment spec (what
:func:`plugdrop.attach_all` takes) when training starts, steps its schedules with the
trainer's optimizer steps, keeps their position in the trainer's checkpoints and logs the
current values. Import the submodule of your trainer; its framework is an optional extra
(``pip install plugdrop[lightning]`` or ``plugdrop[transformers]``).

Accelerate and hand-written loops need no callback: ``pd.attach_all(model, spec, steps=...)``
before or after ``accelerator.prepare``, then ``group.bind(optimizer)``.
"""

__all__: list[str] = []
