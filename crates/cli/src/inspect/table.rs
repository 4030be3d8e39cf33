//! Tables as kubectl prints them: upper-case headers, columns separated
//! by three spaces, fitted to the terminal (the widest column gives way,
//! ending in `…`), coloured only on a terminal and without NO_COLOR.

use std::io::IsTerminal;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    Green,
    Red,
    Yellow,
}

pub struct Cell {
    text: String,
    colour: Option<Colour>,
}

impl<T: Into<String>> From<T> for Cell {
    fn from(text: T) -> Cell {
        Cell {
            text: text.into(),
            colour: None,
        }
    }
}

impl Cell {
    pub fn coloured(text: impl Into<String>, colour: Colour) -> Cell {
        Cell {
            text: text.into(),
            colour: Some(colour),
        }
    }
}

pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

const GAP: usize = 3;
const MIN_WIDTH: usize = 6;

impl Table {
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Table {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text for a terminal `width` columns wide (None: as
    /// wide as it needs), coloured or not.
    pub fn render(&self, width: Option<usize>, colour: bool) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, c) in row.iter().enumerate().take(n) {
                widths[i] = widths[i].max(c.text.chars().count());
            }
        }
        if let Some(limit) = width {
            // The last column needs no gap after it.
            let total = |w: &[usize]| w.iter().sum::<usize>() + GAP * w.len().saturating_sub(1);
            while total(&widths) > limit {
                let Some((widest, &w)) = widths.iter().enumerate().max_by_key(|(_, w)| **w) else {
                    break;
                };
                if w <= MIN_WIDTH {
                    break;
                }
                widths[widest] = (w - (total(&widths) - limit)).max(MIN_WIDTH);
            }
        }
        let mut out = String::new();
        let header: Vec<Cell> = self
            .headers
            .iter()
            .map(|h| Cell::from(h.as_str()))
            .collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, w) in widths.iter().enumerate() {
                let cell = row.get(i);
                let text = cell.map_or("", |c| c.text.as_str());
                let fitted = fit(text, *w);
                let pad = w - fitted.chars().count();
                match cell.and_then(|c| c.colour).filter(|_| colour) {
                    Some(c) => {
                        let code = match c {
                            Colour::Green => "32",
                            Colour::Red => "31",
                            Colour::Yellow => "33",
                        };
                        line.push_str(&format!("\x1b[{code}m{fitted}\x1b[0m"));
                    }
                    None => line.push_str(&fitted),
                }
                if i + 1 < widths.len() {
                    line.push_str(&" ".repeat(pad + GAP));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// The table as stdout takes it: fitted and coloured when that is a
    /// terminal.
    pub fn for_stdout(&self) -> String {
        let tty = std::io::stdout().is_terminal();
        let width = tty
            .then(|| terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)))
            .flatten();
        let colour = tty && std::env::var_os("NO_COLOR").is_none();
        self.render(width, colour)
    }
}

fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(["NAME", "MESSAGE", "AGE"]);
        t.row(vec![
            "member1".into(),
            Cell::coloured("a rather long message that will not fit", Colour::Red),
            "5m".into(),
        ]);
        t.row(vec!["m2".into(), "short".into(), "10d".into()]);
        t
    }

    #[test]
    fn columns_align_and_the_widest_gives_way_to_the_terminal() {
        let wide = sample().render(None, false);
        assert_eq!(
            wide,
            "NAME      MESSAGE                                   AGE\n\
             member1   a rather long message that will not fit   5m\n\
             m2        short                                     10d\n"
        );
        let narrow = sample().render(Some(30), false);
        for line in narrow.lines() {
            assert!(line.chars().count() <= 30, "{line:?}");
        }
        assert!(narrow.contains("member1   a rather long…   5m"), "{narrow}");
        assert!(narrow.contains("10d"));
    }

    #[test]
    fn colour_only_when_asked() {
        assert!(!sample().render(None, false).contains('\x1b'));
        assert!(sample().render(None, true).contains("\x1b[31ma rather"));
    }
}
