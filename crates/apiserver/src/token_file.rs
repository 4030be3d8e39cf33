//! Static bearer tokens from a file (`--token-auth-file`), in
//! kube-apiserver's CSV format: one `token,user,uid[,"group1,group2"]`
//! per line. Blank lines and lines starting with `#` are skipped; a line
//! that is not a record is a startup error naming it. Tokens are kept as
//! SHA-256 digests and compared in constant time.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::warn;

use crate::user::{TokenAuthenticator, User};

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read the token file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "token file {path}, line {line}: {reason} (each line is token,user,uid[,\"group1,group2\"])"
    )]
    Malformed {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

struct Entry {
    digest: [u8; 32],
    user: User,
}

/// The users of a token file.
pub struct StaticTokens {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for StaticTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the digests.
        f.debug_struct("StaticTokens")
            .field("users", &self.entries.len())
            .finish()
    }
}

impl StaticTokens {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<StaticTokens, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        StaticTokens::parse(&text, path)
    }

    /// Parses the file's `text`; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<StaticTokens, TokenFileError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            let malformed = |reason: String| TokenFileError::Malformed {
                path: path.to_path_buf(),
                line: line_no,
                reason,
            };
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let fields = split_csv(line).map_err(malformed)?;
            if fields.len() < 3 {
                return Err(malformed(format!(
                    "{} column(s), at least 3 needed",
                    fields.len()
                )));
            }
            if fields.len() > 4 {
                warn!(path = %path.display(), line = line_no, "token file: columns after the 4th are ignored (quote the groups: \"group1,group2\")");
            }
            let (token, name) = (fields[0].as_str(), fields[1].as_str());
            if token.is_empty() {
                return Err(malformed("the token is empty".into()));
            }
            if name.is_empty() {
                return Err(malformed("the user name is empty".into()));
            }
            let mut groups: Vec<String> = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            groups.push("system:authenticated".into());
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            // A token given twice: the later line wins, as upstream.
            if let Some(earlier) = entries.iter().position(|e| e.digest == digest) {
                warn!(path = %path.display(), line = line_no, "token file: a token is given twice; the later line wins");
                entries.remove(earlier);
            }
            entries.push(Entry {
                digest,
                user: User {
                    name: name.to_string(),
                    groups,
                },
            });
        }
        Ok(StaticTokens { entries })
    }

    /// Tokens made in process (the embedding process's components'
    /// identities, `auth::component_identity`) rather than read from a file.
    pub fn from_identities(identities: &[(String, User)]) -> StaticTokens {
        StaticTokens {
            entries: identities
                .iter()
                .map(|(token, user)| Entry {
                    digest: Sha256::digest(token.as_bytes()).into(),
                    user: user.clone(),
                })
                .collect(),
        }
    }

    /// How many tokens the file gives.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl TokenAuthenticator for StaticTokens {
    fn authenticate(&self, _: &dyn flotilla_store::Store, token: &str) -> Option<User> {
        self.user_for(token)
    }
}

impl StaticTokens {
    /// The user `token` names, if the file gives it.
    pub fn user_for(&self, token: &str) -> Option<User> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Every entry is compared, whichever matches.
        let mut found = None;
        for entry in &self.entries {
            if bool::from(entry.digest.ct_eq(&digest)) {
                found = Some(&entry.user);
            }
        }
        found.cloned()
    }
}

/// One CSV record (RFC 4180 within a line, as Go's encoding/csv with
/// leading spaces trimmed): fields separated by commas, a field in double
/// quotes may hold commas and doubled quotes.
fn split_csv(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.trim_end_matches('\r').chars().peekable();
    loop {
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        let mut field = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    Some('"') if chars.next_if_eq(&'"').is_some() => field.push('"'),
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => {
                        return Err(format!(
                            "column {} opens a quote it does not close",
                            fields.len() + 1
                        ));
                    }
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(c) => {
                    return Err(format!(
                        "{c:?} after the closing quote of column {} (a field is either quoted whole or not at all)",
                        fields.len() + 1
                    ));
                }
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => {
                        fields.push(field);
                        break;
                    }
                    Some('"') => {
                        return Err(format!(
                            "a bare '\"' in column {} (quote the whole field and double the quote)",
                            fields.len() + 1
                        ));
                    }
                    Some(c) => field.push(c),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<StaticTokens, TokenFileError> {
        StaticTokens::parse(text, Path::new("tokens.csv"))
    }

    fn who(tokens: &StaticTokens, token: &str) -> Option<User> {
        tokens.user_for(token)
    }

    #[test]
    fn upstream_format_with_and_without_groups() {
        let tokens = parse(
            "# static users\n\
             s3cr3t,alice,1001,\"dev,qa\"\n\
             \n\
             t0k3n,bob,1002\n\
             other, carol ,1003,ops\r\n",
        )
        .unwrap();
        assert_eq!(tokens.len(), 3);
        let alice = who(&tokens, "s3cr3t").unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, ["dev", "qa", "system:authenticated"]);
        let bob = who(&tokens, "t0k3n").unwrap();
        assert_eq!(bob.groups, ["system:authenticated"]);
        assert_eq!(who(&tokens, "other").unwrap().name, "carol ");
        assert_eq!(who(&tokens, "s3cr3"), None);
        assert_eq!(who(&tokens, ""), None);
    }

    #[test]
    fn quotes_follow_csv() {
        let tokens = parse("\"a,\"\"b\",\"user, with comma\",7\n").unwrap();
        assert_eq!(who(&tokens, "a,\"b").unwrap().name, "user, with comma");
    }

    #[test]
    fn malformed_lines_name_their_line() {
        for (text, line, reason) in [
            ("ok,alice,1\nonly,two\n", 2, "2 column(s)"),
            ("single\n", 1, "1 column(s)"),
            (",alice,1\n", 1, "the token is empty"),
            ("tok,,1\n", 1, "the user name is empty"),
            ("tok,alice,1,\"dev,qa\n", 1, "does not close"),
            ("tok,al\"ice,1\n", 1, "bare"),
            ("\n\ntok,alice,1,\"dev\"x\n", 3, "after the closing quote"),
        ] {
            let e = parse(text).expect_err(text);
            let message = e.to_string();
            assert!(
                message.contains(&format!("tokens.csv, line {line}:")) && message.contains(reason),
                "{text:?}: {message}"
            );
        }
    }

    #[test]
    fn a_later_duplicate_wins() {
        let tokens = parse("tok,alice,1\ntok,bob,2\n").unwrap();
        assert_eq!(tokens.len(), 1);
        assert_eq!(who(&tokens, "tok").unwrap().name, "bob");
    }

    #[test]
    fn arbitrary_text_never_panics() {
        use rand::Rng;
        let mut rng = rand::rng();
        let alphabet = ['a', ',', '"', ' ', '\n', '\r', '#', 'é', '\t'];
        for _ in 0..3000 {
            let text: String = (0..rng.random_range(0..60))
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            let _ = parse(&text);
        }
    }
}
