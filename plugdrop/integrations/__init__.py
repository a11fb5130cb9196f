"""plugdrop in the trainers users already have: a callback for PyTorch Lightning
(:mod:`plugdrop.integrations.lightning`) and one for the Hugging Face ``Trainer``
(:mod:`plugdrop.integrations.transformers`). Each attaches an attachment spec (what
:func:`plugdrop.attach_all` takes) to the model of every training it is given, steps its
schedules with the trainer's optimizer steps, keeps their position in the trainer's
checkpoints (a resumed training continues them), logs the values each step used, and takes
everything off when training ends. Import the submodule of your trainer; its framework is an
optional extra (``pip install plugdrop[lightning]`` or ``plugdrop[transformers]``).

Accelerate and hand-written loops need no callback: ``pd.attach_all(model, spec, steps=...)``
before or after ``accelerator.prepare``, then ``group.bind(optimizer)``.
"""

__all__: list[str] = []
