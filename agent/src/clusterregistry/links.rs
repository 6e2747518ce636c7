//! Local copies stored under another key than their source's (a rule's `groupVersionKind`
//! mutation, or overrides of `/metadata/name` and `/metadata/namespace`), found again by the
//! source they name in [`super::SOURCE_ANNOTATION`]: the index the resource-sync engine keeps
//! from its local watches, so that a change of the source, of the copy, or of the key a copy is
//! routed to wakes the source's key.

use std::collections::{BTreeSet, HashSet};

use dashmap::DashMap;

use super::{api::GroupVersionKind, decide::Key};

/// Local copies stored under another key than their source's, found by that source. Shared by
/// the engine and the watch task of each local kind; no guard of its maps is held beyond one
/// call, so a reader never waits on more than one entry.
#[derive(Default)]
pub struct Links {
    /// Source key → the local copies naming it ([`super::SOURCE_ANNOTATION`]).
    pub copies: DashMap<Key, BTreeSet<Key>>,
    /// Copy → the source it names: undoes the above when the copy changes or goes.
    sources: DashMap<Key, Key>,
    /// Key a source's copy is to be written to → that source: a change there (a local object
    /// made or deleted under that key) wakes the source.
    pub routes: DashMap<Key, Key>,
}

impl Links {
    /// Records what local object `copy` names as its source (`None`: nothing, or it is gone), and
    /// returns the sources to wake: the old and new one, and the one routed to this key. A copy
    /// that moves to another source is found under the new one before it leaves the old one.
    pub fn update(&self, copy: &Key, source: Option<Key>) -> Vec<Key> {
        let mut wake: Vec<Key> = self
            .routes
            .get(copy)
            .map(|routed| routed.clone())
            .into_iter()
            .collect();
        let old = match &source {
            Some(source) => self.sources.insert(copy.clone(), source.clone()),
            None => self.sources.remove(copy).map(|(_, old)| old),
        };
        if let Some(source) = &source
            && old.as_ref() != Some(source)
        {
            self.copies
                .entry(source.clone())
                .or_default()
                .insert(copy.clone());
        }
        if let Some(old) = old {
            if Some(&old) != source.as_ref() {
                // The entry's guard goes before `remove_if` takes the same shard.
                if let Some(mut set) = self.copies.get_mut(&old) {
                    set.remove(copy);
                }
                self.copies.remove_if(&old, |_, set| set.is_empty());
            }
            wake.push(old);
        }
        wake.extend(source);
        wake.sort();
        wake.dedup();
        wake
    }

    /// Records again the copies of `gvk` after a fresh list of that kind (`listed`: each copy
    /// and the source it names): those not listed are forgotten, the others updated in place, so
    /// that a reader never misses a copy that is still there.
    pub fn relist(&self, gvk: &GroupVersionKind, listed: impl IntoIterator<Item = (Key, Key)>) {
        let listed: Vec<(Key, Key)> = listed.into_iter().collect();
        let still: HashSet<&Key> = listed.iter().map(|(copy, _)| copy).collect();
        let gone: Vec<Key> = self
            .sources
            .iter()
            .map(|entry| entry.key().clone())
            .filter(|k| k.gvk == *gvk && !still.contains(k))
            .collect();
        for copy in gone {
            self.update(&copy, None);
        }
        for (copy, source) in listed {
            self.update(&copy, Some(source));
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
        let links = Links::default();
        let source = key("v1/Secret/team-a/db");
        let copy = key("v1/ConfigMap/team-b/db-settings");
        // The copy appears, naming its source: the source is woken and finds it.
        assert_eq!(
            links.update(&copy, Some(source.clone())),
            vec![source.clone()]
        );
        assert_eq!(
            *links.copies.get(&source).unwrap(),
            BTreeSet::from([copy.clone()])
        );

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
    fn relisting_a_kind_unlinks_only_its_copies_that_are_gone() {
        let links = Links::default();
        let source = key("v1/Secret/team-a/db");
        let as_map = key("v1/ConfigMap/team-b/db");
        let as_secret = key("v1/Secret/team-b/db");
        let kept = key("v1/ConfigMap/team-b/db-kept");
        links.update(&as_map, Some(source.clone()));
        links.update(&as_secret, Some(source.clone()));
        links.update(&kept, Some(source.clone()));
        links.relist(&as_map.gvk, [(kept.clone(), source.clone())]);
        assert_eq!(
            *links.copies.get(&source).unwrap(),
            BTreeSet::from([as_secret.clone(), kept.clone()])
        );
        // A listed copy that names another source now moves there.
        let other = key("v1/Secret/team-a/cache");
        links.relist(&kept.gvk, [(kept.clone(), other.clone())]);
        assert_eq!(
            *links.copies.get(&source).unwrap(),
            BTreeSet::from([as_secret])
        );
        assert_eq!(*links.copies.get(&other).unwrap(), BTreeSet::from([kept]));
    }
}
