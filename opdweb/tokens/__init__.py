"""Personal API tokens: one team, read-only or read-write, stored as a sha256 digest, shown
once, accepted as ``Authorization: Bearer`` beside the session (:mod:`.authentication`)."""
