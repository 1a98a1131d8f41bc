//! Who caused a name op, for its change-capture event: the request's
//! access key (set by the access check once the signature is verified)
//! and, where the op alone does not say it, the S3 event name (a copy or a
//! browser POST is a put to the names; a tag change and an ACL change are
//! both metadata rewrites). Each request runs in a scope of its own;
//! [`Attributed`] wraps the ops sent from inside one in `NameOp::As`.

use futures_util::future::BoxFuture;
use std::cell::RefCell;
use std::sync::{Arc, RwLock};
use strata_names::{NameError, NameIndex, NameOp, NameState, Outcome};
use strata_types::Clock;

#[derive(Debug, Clone, Default)]
struct Cause {
    who: Option<String>,
    kind: Option<&'static str>,
}

tokio::task_local! {
    static CAUSE: RefCell<Cause>;
}

/// Runs `f` as one request, whose cause starts unknown.
pub(crate) async fn scope<F: std::future::Future>(f: F) -> F::Output {
    CAUSE.scope(RefCell::new(Cause::default()), f).await
}

/// The request is made by access key `who`.
pub(crate) fn set_who(who: &str) {
    let _ = CAUSE.try_with(|c| c.borrow_mut().who = Some(who.to_owned()));
}

/// The request's name ops are events of `kind` (an S3 event name).
pub(crate) fn set_kind(kind: &'static str) {
    let _ = CAUSE.try_with(|c| c.borrow_mut().kind = Some(kind));
}

/// A name index that sends each op made inside a request's scope as
/// `NameOp::As` with the request's cause and the time.
pub(crate) struct Attributed {
    inner: Arc<dyn NameIndex>,
    clock: Arc<dyn Clock>,
}

impl Attributed {
    pub(crate) fn new(inner: Arc<dyn NameIndex>, clock: Arc<dyn Clock>) -> Self {
        Self { inner, clock }
    }
}

impl NameIndex for Attributed {
    fn apply(&self, op: NameOp) -> BoxFuture<'_, Result<Outcome, NameError>> {
        let op = match CAUSE.try_with(|c| c.borrow().clone()) {
            Ok(c) => NameOp::As { who: c.who, kind: c.kind.map(str::to_owned), now_ms: self.clock.now_ms(), op: Box::new(op) },
            Err(_) => op,
        };
        self.inner.apply(op)
    }

    fn barrier(&self) -> BoxFuture<'_, Result<(), NameError>> {
        self.inner.barrier()
    }

    fn state(&self) -> &RwLock<NameState> {
        self.inner.state()
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
}
