//! Table keys: a domain name as lowercase wire-format labels, without the root label.
//!
//! `kuard.Gateway.xcc.test.` becomes `\x05kuard\x07gateway\x03xcc\x04test`. Every ancestor of a
//! name is a suffix of its key that starts on a label boundary, so walking up the tree on the
//! query path is slicing a stack buffer: no allocation, no `Name` clones.

use hickory_proto::rr::Name;

/// Longest wire-format name (RFC 1035 §2.3.4), which bounds every key.
pub const MAX_KEY_LEN: usize = 255;
/// Most labels a name of at most 255 octets can have.
const MAX_LABELS: usize = 128;

/// A lowercase key built on the stack, with the offsets where each label starts.
pub struct KeyBuf {
    bytes: [u8; MAX_KEY_LEN],
    len: usize,
    starts: [u8; MAX_LABELS],
    labels: usize,
}

impl KeyBuf {
    /// Builds the key of `name`. Returns `None` for names that cannot be a key (too long).
    pub fn from_name(name: &Name) -> Option<Self> {
        let mut buf = KeyBuf {
            bytes: [0; MAX_KEY_LEN],
            len: 0,
            starts: [0; MAX_LABELS],
            labels: 0,
        };
        for label in name.iter() {
            let end = buf.len + 1 + label.len();
            if label.is_empty() || end > MAX_KEY_LEN || buf.labels == MAX_LABELS {
                return None;
            }
            buf.starts[buf.labels] = buf.len as u8;
            buf.labels += 1;
            buf.bytes[buf.len] = label.len() as u8;
            for (dst, src) in buf.bytes[buf.len + 1..end].iter_mut().zip(label) {
                *dst = src.to_ascii_lowercase();
            }
            buf.len = end;
        }
        Some(buf)
    }

    /// An empty key, to be built label by label with [`KeyBuf::push_label`].
    pub fn empty() -> Self {
        KeyBuf {
            bytes: [0; MAX_KEY_LEN],
            len: 0,
            starts: [0; MAX_LABELS],
            labels: 0,
        }
    }

    /// Appends `label` (1 to 63 bytes), lowercased. `None` when it would not fit a key.
    pub fn push_label(&mut self, label: &[u8]) -> Option<()> {
        let end = self.len + 1 + label.len();
        if label.is_empty() || label.len() > 63 || end > MAX_KEY_LEN || self.labels == MAX_LABELS {
            return None;
        }
        self.starts[self.labels] = self.len as u8;
        self.labels += 1;
        self.bytes[self.len] = label.len() as u8;
        for (dst, src) in self.bytes[self.len + 1..end].iter_mut().zip(label) {
            *dst = src.to_ascii_lowercase();
        }
        self.len = end;
        Some(())
    }

    /// The whole key.
    pub fn key(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Number of labels.
    pub fn label_count(&self) -> usize {
        self.labels
    }

    /// The key of the ancestor that drops the first `n` labels (`n == 0` is the name itself).
    pub fn ancestor(&self, n: usize) -> &[u8] {
        if n >= self.labels {
            return &[];
        }
        &self.bytes[self.starts[n] as usize..self.len]
    }
}

/// The owned key of `name`, for the writer side.
pub fn key_of(name: &Name) -> Option<Box<[u8]>> {
    KeyBuf::from_name(name).map(|k| k.key().into())
}

/// Key of the wildcard child (`*.<parent>`) of a parent key, built in `out`.
pub fn wildcard_key<'a>(parent: &[u8], out: &'a mut [u8; MAX_KEY_LEN + 2]) -> &'a [u8] {
    out[0] = 1;
    out[1] = b'*';
    out[2..2 + parent.len()].copy_from_slice(parent);
    &out[..2 + parent.len()]
}

/// Whether `key` lies at or under `zone` (both keys; `zone` on a label boundary of `key`).
pub fn in_zone(key: &[u8], zone: &[u8]) -> bool {
    if !key.ends_with(zone) {
        return false;
    }
    // Walk the labels to make sure the suffix starts on a label boundary.
    let want = key.len() - zone.len();
    let mut at = 0;
    while at < want {
        at += 1 + key[at] as usize;
    }
    at == want
}

/// Ancestor keys of `key` strictly above it, nearest first (the last one is its top label).
pub fn ancestors(key: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= key.len() {
            return None;
        }
        at += 1 + key[at] as usize;
        (at < key.len()).then(|| &key[at..])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    #[test]
    fn keys_are_lowercase_wire_labels() {
        let k = KeyBuf::from_name(&name("Kuard.GATEWAY.xcc.test.")).unwrap();
        assert_eq!(k.key(), b"\x05kuard\x07gateway\x03xcc\x04test");
        assert_eq!(k.label_count(), 4);
        assert_eq!(k.ancestor(1), b"\x07gateway\x03xcc\x04test");
        assert_eq!(k.ancestor(3), b"\x04test");
        assert_eq!(k.ancestor(4), b"");
    }

    #[test]
    fn keys_built_label_by_label_equal_keys_of_names() {
        let mut k = KeyBuf::empty();
        for label in [&b"Kuard"[..], b"GATEWAY", b"xcc", b"test"] {
            k.push_label(label).unwrap();
        }
        let from_name = KeyBuf::from_name(&name("kuard.gateway.xcc.test.")).unwrap();
        assert_eq!(k.key(), from_name.key());
        assert_eq!(k.label_count(), 4);
        assert_eq!(k.ancestor(2), from_name.ancestor(2));
        assert!(k.push_label(&[b'a'; 64]).is_none());
        assert!(k.push_label(b"").is_none());
    }

    #[test]
    fn zone_membership_respects_label_boundaries() {
        let zone = key_of(&name("xcc.test.")).unwrap();
        assert!(in_zone(&key_of(&name("a.xcc.test.")).unwrap(), &zone));
        assert!(in_zone(&zone, &zone));
        // "\x03xcc\x04test" is a byte suffix of "\x04axcc\x04test" only if labels lined up; they don't.
        assert!(!in_zone(&key_of(&name("bxcc.test.")).unwrap(), &zone));
        assert!(!in_zone(&key_of(&name("test.")).unwrap(), &zone));
    }

    #[test]
    fn ancestors_walk_up_to_the_top_label() {
        let k = key_of(&name("a.b.c.")).unwrap();
        let up: Vec<&[u8]> = ancestors(&k).collect();
        assert_eq!(up, vec![&b"\x01b\x01c"[..], &b"\x01c"[..]]);
    }

    #[test]
    fn wildcard_key_prefixes_a_star_label() {
        let parent = key_of(&name("gw.xcc.test.")).unwrap();
        let mut buf = [0; MAX_KEY_LEN + 2];
        assert_eq!(
            wildcard_key(&parent, &mut buf),
            &key_of(&name("*.gw.xcc.test.")).unwrap()[..]
        );
    }
}
