//! Container image references split into the parts an imageOverrider
//! changes: `[registry/]repository[:tag][@digest]`, with Docker's rule for
//! telling a registry from the first path segment of a repository.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub registry: String,
    pub repository: String,
    pub tag: String,
    pub digest: String,
}

impl Image {
    /// Splits `image`; an empty reference, or one without a repository,
    /// is refused.
    pub fn parse(image: &str) -> Result<Image, String> {
        let image = image.trim();
        let (rest, digest) = match image.split_once('@') {
            Some((r, d)) => (r, d.to_string()),
            None => (image, String::new()),
        };
        // A tag's colon comes after the last slash; one before it is a
        // registry's port.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (
                &rest[..last_slash + i],
                rest[last_slash + i + 1..].to_string(),
            ),
            None => (rest, String::new()),
        };
        let (registry, repository) = match name.split_once('/') {
            Some((first, path))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), path.to_string())
            }
            _ => (String::new(), name.to_string()),
        };
        if repository.is_empty() {
            return Err(format!("image {image:?} has no repository"));
        }
        Ok(Image {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// The tag, or else the digest: what the `Tag` component stands for.
    pub fn tag_or_digest(&self) -> &str {
        if self.tag.is_empty() {
            &self.digest
        } else {
            &self.tag
        }
    }

    /// Sets a digest (`algorithm:hex`) or a tag, clearing the other.
    pub fn set_tag_or_digest(&mut self, value: &str) {
        if value.contains(':') {
            self.digest = value.to_string();
            self.tag.clear();
        } else {
            self.tag = value.to_string();
            self.digest.clear();
        }
    }
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.registry.is_empty() {
            write!(f, "{}/", self.registry)?;
        }
        f.write_str(&self.repository)?;
        if !self.tag.is_empty() {
            write!(f, ":{}", self.tag)?;
        }
        if !self.digest.is_empty() {
            write!(f, "@{}", self.digest)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(s: &str) -> (String, String, String, String) {
        let i = Image::parse(s).unwrap();
        (i.registry, i.repository, i.tag, i.digest)
    }

    #[test]
    fn a_registry_is_told_from_a_repository_path_and_a_port_from_a_tag() {
        let own = |a: &str, b: &str, c: &str, d: &str| {
            (a.to_string(), b.to_string(), c.to_string(), d.to_string())
        };
        assert_eq!(parts("nginx"), own("", "nginx", "", ""));
        assert_eq!(parts("nginx:1.25"), own("", "nginx", "1.25", ""));
        assert_eq!(
            parts("library/nginx:1.25"),
            own("", "library/nginx", "1.25", "")
        );
        assert_eq!(
            parts("registry.k8s.io/pause:3.9"),
            own("registry.k8s.io", "pause", "3.9", "")
        );
        assert_eq!(
            parts("localhost:5000/team/app"),
            own("localhost:5000", "team/app", "", "")
        );
        assert_eq!(
            parts("ghcr.io/org/app@sha256:abc"),
            own("ghcr.io", "org/app", "", "sha256:abc")
        );
        for s in [
            "nginx",
            "nginx:1.25",
            "localhost:5000/team/app:v1",
            "ghcr.io/org/app:v1@sha256:abc",
        ] {
            assert_eq!(Image::parse(s).unwrap().to_string(), s);
        }
        assert!(Image::parse("").is_err());
        assert!(Image::parse("registry.example.com/").is_err());
    }

    #[test]
    fn a_digest_replaces_a_tag_and_a_tag_a_digest() {
        let mut i = Image::parse("nginx:1.25").unwrap();
        i.set_tag_or_digest("sha256:0123");
        assert_eq!(i.to_string(), "nginx@sha256:0123");
        assert_eq!(i.tag_or_digest(), "sha256:0123");
        i.set_tag_or_digest("1.26");
        assert_eq!(i.to_string(), "nginx:1.26");
    }
}
