"""Checkpoints and files by URI, for hosts that share no disk.

A checkpoint is named by a URI (:mod:`.uri`): a local path under the model roots, as always,
or ``s3://bucket/prefix`` on any S3-compatible server.  The URI names a store
(:mod:`.stores`: one module per scheme, :mod:`.local` and :mod:`.s3`).  A worker's
``describe`` job (:mod:`.describe`) reads a checkpoint once and reports its content digest;
a worker fetches what a URI names into its local cache (:mod:`.cache`, :mod:`.fetch`),
content-addressed by digest and verified after download.

No Django here: the web process imports :mod:`.uri` to check and store references, never a
module that reads weights.
"""
