//! Who made a request, and the one interface every way of recognising a
//! bearer token implements (admin token, bootstrap tokens, ServiceAccount
//! tokens, a static token file): the bottom of authentication, which the
//! authenticators and everything that decides on a user import.

use std::sync::Arc;

use flotilla_store::Store;

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// Who a request without credentials is, as upstream names it.
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        }
    }
}

/// One way of recognising a bearer token.
pub trait TokenAuthenticator: Send + Sync {
    /// The user, when the token is one of this kind and valid.
    fn authenticate(&self, store: &dyn Store, token: &str) -> Option<User>;
}

impl<T: TokenAuthenticator + ?Sized> TokenAuthenticator for Arc<T> {
    fn authenticate(&self, store: &dyn Store, token: &str) -> Option<User> {
        (**self).authenticate(store, token)
    }
}
