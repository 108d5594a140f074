"""Checkpoints and files by URI, for hosts that share no disk.

A checkpoint is a reference (:mod:`.reference`): a URI and the content digest of its
weights.  The URI names a store (:mod:`.stores`): a local directory (a path under the model
roots, as always) or an S3 bucket and prefix (:mod:`.s3`, any S3-compatible server).  A
worker fetches what a reference names into its local cache (:mod:`.cache`), content-addressed
by digest and verified after download.

No Django here: the web process imports :mod:`.uri` and :mod:`.reference` to check and store
references, never a module that reads weights.
"""
