//! The input line: text with a cursor, the usual moves and deletions, and the lines sent
//! before, to bring back with ↑ and ↓.

/// The most lines kept to bring back.
const MAX_HISTORY: usize = 200;

/// A line being typed.
#[derive(Debug, Default)]
pub struct LineEditor {
    text: String,
    /// Where the cursor is, in characters from the start.
    cursor: usize,
    /// Lines sent before, oldest first.
    history: Vec<String>,
    /// Which of them is shown, while going through them; the line typed before is kept.
    browsing: Option<(usize, String)>,
}

impl LineEditor {
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The text before and after the cursor.
    pub fn split(&self) -> (&str, &str) {
        self.text.split_at(self.byte(self.cursor))
    }

    pub fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.browsing = None;
    }

    /// Takes the line (remembering it, when it is not blank) and leaves the editor empty.
    pub fn take(&mut self) -> String {
        let line = std::mem::take(&mut self.text);
        self.cursor = 0;
        self.browsing = None;
        if !line.trim().is_empty() && self.history.last() != Some(&line) {
            self.history.push(line.clone());
            if self.history.len() > MAX_HISTORY {
                self.history.remove(0);
            }
        }
        line
    }

    pub fn insert(&mut self, character: char) {
        let at = self.byte(self.cursor);
        self.text.insert(at, character);
        self.cursor += 1;
    }

    pub fn insert_str(&mut self, text: &str) {
        for character in text.chars() {
            self.insert(character);
        }
    }

    /// Deletes the character before the cursor.
    pub fn backspace(&mut self) {
        if self.cursor > 0 {
            self.cursor -= 1;
            let at = self.byte(self.cursor);
            self.text.remove(at);
        }
    }

    /// Deletes the character under the cursor.
    pub fn delete(&mut self) {
        if self.cursor < self.len() {
            let at = self.byte(self.cursor);
            self.text.remove(at);
        }
    }

    /// Deletes the word before the cursor (and the spaces after it).
    pub fn delete_word(&mut self) {
        let before: Vec<char> = self.text.chars().take(self.cursor).collect();
        let mut start = before.len();
        while start > 0 && before[start - 1].is_whitespace() {
            start -= 1;
        }
        while start > 0 && !before[start - 1].is_whitespace() {
            start -= 1;
        }
        let (from, to) = (self.byte(start), self.byte(self.cursor));
        self.text.replace_range(from..to, "");
        self.cursor = start;
    }

    pub fn left(&mut self) {
        self.cursor = self.cursor.saturating_sub(1);
    }

    pub fn right(&mut self) {
        self.cursor = (self.cursor + 1).min(self.len());
    }

    pub fn home(&mut self) {
        self.cursor = 0;
    }

    pub fn end(&mut self) {
        self.cursor = self.len();
    }

    /// Shows the line sent before the one shown.
    pub fn previous(&mut self) {
        let index = match &self.browsing {
            None if self.history.is_empty() => return,
            None => {
                self.browsing = Some((self.history.len() - 1, self.text.clone()));
                self.history.len() - 1
            }
            Some((0, _)) => return,
            Some((index, typed)) => {
                let index = index - 1;
                self.browsing = Some((index, typed.clone()));
                index
            }
        };
        self.show(self.history[index].clone());
    }

    /// Shows the line sent after the one shown, or the line that was being typed.
    pub fn next(&mut self) {
        let Some((index, typed)) = self.browsing.take() else { return };
        if index + 1 < self.history.len() {
            self.browsing = Some((index + 1, typed));
            self.show(self.history[index + 1].clone());
        } else {
            self.show(typed);
        }
    }

    fn show(&mut self, text: String) {
        self.text = text;
        self.cursor = self.len();
    }

    fn len(&self) -> usize {
        self.text.chars().count()
    }

    /// The byte offset of character `index`.
    fn byte(&self, index: usize) -> usize {
        self.text.char_indices().nth(index).map_or(self.text.len(), |(at, _)| at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editing_moves_and_history() {
        let mut line = LineEditor::default();
        line.insert_str("héllo wörld");
        line.home();
        line.right();
        line.delete();
        line.insert('e');
        assert_eq!(line.split(), ("he", "llo wörld"));
        line.end();
        line.delete_word();
        assert_eq!(line.as_str(), "hello ");
        line.backspace();
        assert_eq!(line.take(), "hello");
        line.insert_str("second");
        line.take();
        line.insert_str("draft");
        line.previous();
        assert_eq!(line.as_str(), "second");
        line.previous();
        line.previous();
        assert_eq!(line.as_str(), "hello");
        line.next();
        line.next();
        assert_eq!(line.as_str(), "draft", "going past the newest brings the draft back");
        line.left();
        line.left();
        line.insert('X');
        assert_eq!(line.split(), ("draX", "ft"));
    }
}
