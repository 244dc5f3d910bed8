"""Recovery in one package: checkpoints, their files and logs, and the restart loop.

=====================================  =========================================================
module                                 what it owns
=====================================  =========================================================
:mod:`naiad.recovery.snapshot`         a vertex state in a checkpoint: the versioned container
:mod:`naiad.recovery.directory`        the checkpoint directory: private, locked, its HMAC key
:mod:`naiad.recovery.logs`             append-only epoch logs (inputs, collected outputs)
:mod:`naiad.recovery.journal`          append-only checkpoint journals: records with an HMAC
:mod:`naiad.recovery.restored`         what a process resumes from; the layout checks
:mod:`naiad.recovery.legacy`           checkpoint directories of earlier releases, read
:mod:`naiad.recovery.store`            checkpoints: write parts, commit, prune, find the latest
:mod:`naiad.recovery.committer`        the thread that makes a checkpoint durable
:mod:`naiad.recovery.coordinator`      when and how a consistent checkpoint is cut
:mod:`naiad.recovery.restart`          the supervisor loop: restart from the last checkpoint
=====================================  =========================================================

The modules sit at different layers (``tests/test_layers.py``): the worker writes snapshots, the
computation uses the store and the coordinator, and ``execute`` runs the restart loop.  This
module imports none of them, so importing one does not import the others.
"""
