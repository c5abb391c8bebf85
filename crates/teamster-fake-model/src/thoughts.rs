//! The reasoning the fake sent, remembered so that later requests can be checked to carry it
//! back unchanged, as providers check it: a `thinking` block's signature (or a
//! `redacted_thinking` block's data) must be one the fake issued, for the same text, and under
//! `[thinking]` the message that holds a tool call must carry back exactly the reasoning its
//! answer was sent with.

use crate::BoundedMap;

/// One piece of reasoning, as sent and as a request carries it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Thought {
    /// An Anthropic `thinking` block.
    Signed { thinking: String, signature: String },
    /// An Anthropic `redacted_thinking` block.
    Redacted { data: String },
    /// OpenAI-compatible `reasoning_content`.
    Text(String),
}

/// What the fake remembers of the reasoning it sent.
#[derive(Default)]
pub(crate) struct Ledger {
    /// Every block issued, by its signature or redacted data.
    blocks: BoundedMap<String, Thought>,
    /// The reasoning each `[thinking]` tool call was sent with, by call id.
    calls: BoundedMap<String, Vec<Thought>>,
}

/// Why a request's reasoning is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ThoughtError {
    #[error("Invalid `signature` in `thinking` block")]
    Signature,
    #[error("Invalid `data` in `redacted_thinking` block")]
    RedactedData,
    #[error("the reasoning of the answer that called {0} did not come back exactly as it was sent")]
    NotReturned(String),
}

impl Ledger {
    /// Remembers the blocks of an answer, and, when `call_ids` is not empty, that these calls
    /// must come back with all of `thoughts`.
    pub(crate) fn issue(&mut self, thoughts: &[Thought], call_ids: &[String]) {
        for thought in thoughts {
            match thought {
                Thought::Signed { signature: key, .. } | Thought::Redacted { data: key } => {
                    self.blocks.insert(key.clone(), thought.clone());
                }
                Thought::Text(_) => {}
            }
        }
        for id in call_ids {
            self.calls.insert(id.clone(), thoughts.to_vec());
        }
    }

    /// Checks the reasoning an assistant message of a request carries back, the message holding
    /// the tool calls `call_ids`.
    pub(crate) fn check(&self, returned: &[Thought], call_ids: &[String]) -> Result<(), ThoughtError> {
        for thought in returned {
            match thought {
                Thought::Signed { signature, .. } if self.blocks.get(signature) != Some(thought) => {
                    return Err(ThoughtError::Signature);
                }
                Thought::Redacted { data } if self.blocks.get(data) != Some(thought) => {
                    return Err(ThoughtError::RedactedData);
                }
                _ => {}
            }
        }
        for id in call_ids {
            if let Some(sent) = self.calls.get(id)
                && sent.as_slice() != returned
            {
                return Err(ThoughtError::NotReturned(id.clone()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_must_come_back_byte_for_byte() {
        let signed = Thought::Signed { thinking: "Let me think.".into(), signature: "EqQB+/==".into() };
        let redacted = Thought::Redacted { data: "EmwK/+==".into() };
        let mut ledger = Ledger::default();
        ledger.issue(&[signed.clone(), redacted.clone()], &["toolu_1".into()]);
        let call = ["toolu_1".to_owned()];
        assert_eq!(ledger.check(&[signed.clone(), redacted.clone()], &call), Ok(()));
        assert_eq!(ledger.check(&[signed.clone(), redacted.clone()], &[]), Ok(()));
        assert_eq!(ledger.check(std::slice::from_ref(&signed), &call), Err(ThoughtError::NotReturned("toolu_1".into())));
        assert_eq!(ledger.check(&[], &call), Err(ThoughtError::NotReturned("toolu_1".into())));
        let altered = Thought::Signed { thinking: "Let me think.".into(), signature: "EqQB+/=".into() };
        assert_eq!(ledger.check(&[altered], &[]), Err(ThoughtError::Signature));
        let other_text = Thought::Signed { thinking: "Let me think!".into(), signature: "EqQB+/==".into() };
        assert_eq!(ledger.check(&[other_text], &[]), Err(ThoughtError::Signature));
        assert_eq!(ledger.check(&[Thought::Redacted { data: "x".into() }], &[]), Err(ThoughtError::RedactedData));
        assert_eq!(ledger.check(&[], &["toolu_9".into()]), Ok(()), "calls sent without [thinking] are free");
    }
}
