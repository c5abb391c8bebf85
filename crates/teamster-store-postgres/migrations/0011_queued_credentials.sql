-- The API key a queued message was queued with (NULL for callers without one): a message whose
-- key was revoked since never starts a turn or joins one.
ALTER TABLE queued_messages ADD COLUMN credential TEXT;
