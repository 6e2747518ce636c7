//! Status values with fixed wire strings.
//!
//! A status field such as `state`, or the `reason` of a condition, takes one of a few values
//! that users' tooling, printer columns and docs read. [`status_enum!`](crate::status_enum) declares
//! them as an enum whose variants carry the exact strings, with an `Unknown(String)` fallback: a
//! value written by the original controllers or by a newer xcc still reads, and is written back
//! unchanged.

/// Declares an enum of status values, each with its wire string:
///
/// ```
/// xcc_kube::status_enum! {
///     /// Reasons of the `Ready` condition.
///     pub enum Reason {
///         /// All is well.
///         Synced = "Synced",
///         Failed = "ApplyFailed",
///     }
/// }
/// assert_eq!(Reason::Failed.as_str(), "ApplyFailed");
/// assert_eq!(Reason::from("Synced"), Reason::Synced);
/// assert_eq!(Reason::from("Later"), Reason::Unknown("Later".into()));
/// ```
///
/// The enum gets `as_str()`, `Display`, `From<&str>` (unknown strings become `Unknown`),
/// `Into<String>`, `Into<Cow<'static, str>>` (what a [`Verdict`](crate::status::Verdict) takes as
/// its reason; a known value borrows its wire string), and
/// serde as a plain string. It has no `JsonSchema`: a field of this type in a CRD says
/// `#[schemars(with = "String")]`, so that the schema stays the plain string the originals
/// declare (an enum list would refuse the values another version writes).
#[macro_export]
macro_rules! status_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know (written by another version), kept as read.
            Unknown(::std::string::String),
        }

        impl $name {
            /// Every value this version writes.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            /// The value as it is written in a status.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $wire, )+
                    $name::Unknown(other) => other,
                }
            }
        }

        impl ::std::convert::From<&str> for $name {
            fn from(value: &str) -> Self {
                match value {
                    $( $wire => $name::$variant, )+
                    other => $name::Unknown(other.to_owned()),
                }
            }
        }

        impl ::std::convert::From<$name> for ::std::string::String {
            fn from(value: $name) -> Self {
                match value {
                    $name::Unknown(other) => other,
                    known => known.as_str().to_owned(),
                }
            }
        }

        impl ::std::convert::From<$name> for ::std::borrow::Cow<'static, str> {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => ::std::borrow::Cow::Borrowed($wire), )+
                    $name::Unknown(other) => ::std::borrow::Cow::Owned(other),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::cmp::PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl ::std::cmp::PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl ::std::cmp::PartialEq<$name> for ::std::borrow::Cow<'_, str> {
            fn eq(&self, other: &$name) -> bool {
                self.as_ref() == other.as_str()
            }
        }

        impl $crate::__serde::Serialize for $name {
            fn serialize<S: $crate::__serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                let value =
                    <::std::string::String as $crate::__serde::Deserialize>::deserialize(
                        deserializer,
                    )?;
                ::std::result::Result::Ok($name::from(value.as_str()))
            }
        }
    };
}

#[cfg(test)]
mod tests {
    crate::status_enum! {
        enum State {
            Applied = "applied",
            LeftBehind = "LeftBehind",
        }
    }

    #[test]
    fn values_keep_their_wire_strings_and_unknown_ones_round_trip() {
        for state in State::KNOWN {
            let json = serde_json::to_value(state).unwrap();
            assert_eq!(json, state.as_str());
            assert_eq!(&serde_json::from_value::<State>(json).unwrap(), state);
        }
        assert_eq!(State::Applied.to_string(), "applied");
        assert_eq!(State::from("LeftBehind"), State::LeftBehind);
        // A value of another version reads, and is written back as it was.
        let other: State = serde_json::from_value("Pruned".into()).unwrap();
        assert_eq!(other, State::Unknown("Pruned".into()));
        assert_eq!(serde_json::to_value(&other).unwrap(), "Pruned");
        assert!(State::LeftBehind == *"LeftBehind");
        assert_eq!(State::LeftBehind, "LeftBehind");
        assert_ne!(State::Applied, "Applied");
        // Not a string: an error, as for the plain string field it replaces.
        assert!(serde_json::from_value::<State>(true.into()).is_err());
    }
}
