//! Local copies stored under another key than their source's (a rule's `groupVersionKind`
//! mutation, or overrides of `/metadata/name` and `/metadata/namespace`), found again by the
//! source they name in [`super::SOURCE_ANNOTATION`]: the index the resource-sync engine keeps
//! from its local watches, so that a change of the source, of the copy, or of the key a copy is
//! routed to wakes the source's key.

use std::collections::{BTreeSet, HashMap};

use super::{api::GroupVersionKind, decide::Key};

/// Local copies stored under another key than their source's, found by that source.
#[derive(Default)]
pub struct Links {
    /// Source key → the local copies naming it ([`super::SOURCE_ANNOTATION`]).
    pub copies: HashMap<Key, BTreeSet<Key>>,
    /// Copy → the source it names: undoes the above when the copy changes or goes.
    sources: HashMap<Key, Key>,
    /// Key a source's copy is to be written to → that source: a change there (a local object
    /// made or deleted under that key) wakes the source.
    pub routes: HashMap<Key, Key>,
}

impl Links {
    /// Records what local object `copy` names as its source (`None`: nothing, or it is gone), and
    /// returns the sources to wake: the old and new one, and the one routed to this key.
    pub fn update(&mut self, copy: &Key, source: Option<Key>) -> Vec<Key> {
        let mut wake: Vec<Key> = self.routes.get(copy).cloned().into_iter().collect();
        if let Some(old) = self.sources.remove(copy) {
            if let Some(set) = self.copies.get_mut(&old) {
                set.remove(copy);
                if set.is_empty() {
                    self.copies.remove(&old);
                }
            }
            wake.push(old);
        }
        if let Some(source) = source {
            self.copies
                .entry(source.clone())
                .or_default()
                .insert(copy.clone());
            self.sources.insert(copy.clone(), source.clone());
            wake.push(source);
        }
        wake.sort();
        wake.dedup();
        wake
    }

    /// Forgets the copies of `gvk`, before a fresh list of that kind records them again.
    pub fn forget(&mut self, gvk: &GroupVersionKind) {
        let gone: Vec<Key> = self
            .sources
            .keys()
            .filter(|k| k.gvk == *gvk)
            .cloned()
            .collect();
        for copy in gone {
            self.update(&copy, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(annotation: &str) -> Key {
        Key::parse(annotation).expect("a key")
    }

    #[test]
    fn a_moved_copy_is_found_by_its_source_and_every_change_wakes_the_sources_concerned() {
        let mut links = Links::default();
        let source = key("v1/Secret/team-a/db");
        let copy = key("v1/ConfigMap/team-b/db-settings");
        // The copy appears, naming its source: the source is woken and finds it.
        assert_eq!(
            links.update(&copy, Some(source.clone())),
            vec![source.clone()]
        );
        assert_eq!(links.copies[&source], BTreeSet::from([copy.clone()]));

        // The copy now names another source: both are woken, the first no longer finds it.
        let other = key("v1/Secret/team-a/cache");
        let mut woken = links.update(&copy, Some(other.clone()));
        woken.sort();
        let mut want = vec![source.clone(), other.clone()];
        want.sort();
        assert_eq!(woken, want);
        assert!(!links.copies.contains_key(&source));

        // A local object made under a key some source's copy is routed to wakes that source,
        // even though it names none.
        let routed = key("v1/ConfigMap/team-b/planned");
        links.routes.insert(routed.clone(), source.clone());
        assert_eq!(links.update(&routed, None), vec![source.clone()]);

        // Gone: its source is woken and forgets it.
        assert_eq!(links.update(&copy, None), vec![other.clone()]);
        assert!(links.copies.is_empty());
    }

    #[test]
    fn forgetting_a_kind_unlinks_only_its_copies() {
        let mut links = Links::default();
        let source = key("v1/Secret/team-a/db");
        let as_map = key("v1/ConfigMap/team-b/db");
        let as_secret = key("v1/Secret/team-b/db");
        links.update(&as_map, Some(source.clone()));
        links.update(&as_secret, Some(source.clone()));
        links.forget(&as_map.gvk);
        assert_eq!(links.copies[&source], BTreeSet::from([as_secret]));
    }
}
