//! X.509 subjects with repeated attributes. A user's groups are the
//! subject's O attributes, one per group, but rcgen's `DistinguishedName`
//! keeps one value per attribute type. So certificates and requests are
//! made by rcgen and then given the exact subject: its DER is put in
//! place of rcgen's and the changed to-be-signed part is signed again with
//! the same key and algorithm.

use base64::Engine;

#[derive(Debug, thiserror::Error)]
pub enum DerError {
    #[error("malformed DER: {0}")]
    Malformed(&'static str),
    #[error("cannot sign: {0}")]
    Sign(#[from] rcgen::Error),
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const UTF8_STRING: u8 = 0x0c;
const BIT_STRING: u8 = 0x03;
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];

/// The DER of a Name with `common_name` and one O per organization, in
/// that order (as `openssl req -subj /CN=alice/O=dev/O=qa` writes it).
pub fn subject(common_name: &str, organizations: &[String]) -> Vec<u8> {
    let attribute = |oid: &[u8], value: &str| {
        let pair = [tlv(OID, oid), tlv(UTF8_STRING, value.as_bytes())].concat();
        tlv(SET, &tlv(SEQUENCE, &pair))
    };
    let mut rdns = attribute(OID_COMMON_NAME, common_name);
    for o in organizations {
        rdns.extend(attribute(OID_ORGANIZATION, o));
    }
    tlv(SEQUENCE, &rdns)
}

/// Which signed structure to change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signed {
    /// A certificate: the subject is the 6th field of TBSCertificate
    /// (after version, serial, signature, issuer, validity).
    Certificate,
    /// A PKCS#10 request: the subject is the 2nd field of its info.
    Request,
}

/// `der` (signed by `key`) with `subject` (a DER Name) as its subject,
/// signed again by `key`.
pub fn with_subject(
    der: &[u8],
    subject: &[u8],
    kind: Signed,
    key: &impl rcgen::SigningKey,
) -> Result<Vec<u8>, DerError> {
    let (tag, body, rest) = split(der)?;
    if tag != SEQUENCE || !rest.is_empty() {
        return Err(DerError::Malformed("not a SEQUENCE"));
    }
    let parts = elements(body)?;
    let [info, algorithm, _signature] = parts.as_slice() else {
        return Err(DerError::Malformed("not a signed structure"));
    };
    let (tag, info_body, _) = split(info)?;
    if tag != SEQUENCE {
        return Err(DerError::Malformed("the signed part is not a SEQUENCE"));
    }
    let (subject_tag, _, subject_rest) = split(subject)?;
    if subject_tag != SEQUENCE || !subject_rest.is_empty() {
        return Err(DerError::Malformed("the subject is not a Name"));
    }
    let mut fields = elements(info_body)?;
    let index = match kind {
        Signed::Certificate if fields.first().is_some_and(|f| f.first() == Some(&0xa0)) => 5,
        Signed::Certificate => 4,
        Signed::Request => 1,
    };
    let slot = fields
        .get_mut(index)
        .ok_or(DerError::Malformed("no subject"))?;
    *slot = subject;
    let info = tlv(SEQUENCE, &fields.concat());
    let signature = key.sign(&info)?;
    let signature = tlv(BIT_STRING, &[&[0u8][..], &signature].concat());
    Ok(tlv(SEQUENCE, &[&info[..], algorithm, &signature].concat()))
}

/// PEM of `der` under `label` (`CERTIFICATE`, `CERTIFICATE REQUEST`).
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = vec![tag];
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// The first TLV of `buf`: its tag, its content, and what follows it.
fn split(buf: &[u8]) -> Result<(u8, &[u8], &[u8]), DerError> {
    let short = DerError::Malformed("truncated");
    let (&tag, rest) = buf.split_first().ok_or(short)?;
    if tag & 0x1f == 0x1f {
        return Err(DerError::Malformed("high tag numbers are not used here"));
    }
    let (&first, rest) = rest.split_first().ok_or(DerError::Malformed("truncated"))?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(DerError::Malformed("bad length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(DerError::Malformed("truncated"));
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The TLVs `buf` is made of, each whole (header included).
fn elements(mut buf: &[u8]) -> Result<Vec<&[u8]>, DerError> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let (_, _, rest) = split(buf)?;
        let whole = buf.len() - rest.len();
        out.push(&buf[..whole]);
        buf = rest;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    #[test]
    fn a_certificate_gets_every_organization() {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::default().self_signed(&key).unwrap();
        let groups = vec!["dev".to_string(), "qa".to_string(), "a".repeat(300)];
        let der = with_subject(
            cert.der(),
            &subject("alice", &groups),
            Signed::Certificate,
            &key,
        )
        .unwrap();
        let c = crate::client_cert::user_from_der(&der).unwrap();
        assert_eq!(c.user.name, "alice");
        assert_eq!(c.user.groups[..3], groups[..]);
        // Still verifies under the same key.
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
        parsed.verify_signature(None).unwrap();
    }

    #[test]
    fn a_request_gets_every_organization_and_still_verifies() {
        let key = KeyPair::generate().unwrap();
        let csr = CertificateParams::default()
            .serialize_request(&key)
            .unwrap();
        let der = with_subject(
            csr.der(),
            &subject("alice", &["dev".into(), "qa".into()]),
            Signed::Request,
            &key,
        )
        .unwrap();
        let parsed =
            rcgen::CertificateSigningRequestParams::from_pem(&pem("CERTIFICATE REQUEST", &der))
                .unwrap();
        let _ = parsed;
        use x509_parser::prelude::FromDer;
        let (_, req) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
        req.verify_signature().unwrap();
        let orgs: Vec<_> = req
            .certification_request_info
            .subject
            .iter_organization()
            .map(|o| o.as_str().unwrap().to_string())
            .collect();
        assert_eq!(orgs, ["dev", "qa"]);
    }

    #[test]
    fn garbage_is_an_error() {
        let key = KeyPair::generate().unwrap();
        for bad in [
            &b""[..],
            b"\x30",
            b"\x30\x85\x00",
            b"\x30\x02\x01\x00",
            b"\x1f\x00",
        ] {
            assert!(with_subject(bad, &subject("a", &[]), Signed::Request, &key).is_err());
        }
    }
}
