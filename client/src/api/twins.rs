//! [`twins!`]: an object's handle written once, given as a blocking type and an async type.

/// Defines the methods of a blocking handle `$Sync` and an async handle `$Async` from one
/// list. Each body is an async block over `self.core`; `$io` names the caller's
/// [`Io`](crate::transport::Io) in it, and `$M` the caller's [`CallStyle`](crate::api::CallStyle) type
/// (for the guards it returns). The blocking methods run the body on the calling thread; the
/// async ones are awaited on the caller's executor. Neither spawns.
macro_rules! twins {
    (
        $Sync:ident, $Async:ident, io = $io:ident, style = $M:ident;
        $(
            $(#[$attr:meta])*
            fn $name:ident(&$self:ident $(, $arg:ident: $ty:ty)*) -> $ret:ty $body:block
        )*
    ) => {
        const _: () = {
            use $crate::api::Blocking as $M;

            impl $Sync {
                $(
                    $(#[$attr])*
                    pub fn $name(&$self $(, $arg: $ty)*) -> $ret {
                        let $io = $crate::api::style::io::<$M>();
                        $self.core.ctx.bg.block_on(async move $body)
                    }
                )*
            }
        };

        const _: () = {
            use $crate::api::Async as $M;

            impl $Async {
                $(
                    $(#[$attr])*
                    pub async fn $name(&$self $(, $arg: $ty)*) -> $ret {
                        let $io = $crate::api::style::io::<$M>();
                        $self.core.ctx.bg.enter(async move $body).await
                    }
                )*
            }
        };
    };
}

/// `Debug` and `name()` for handles whose core has a `name` (the object's key).
macro_rules! named {
    ($what:literal: $($T:ident)*) => {$(
        impl std::fmt::Debug for $T {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($T))
                    .field("name", &self.core.name)
                    .finish_non_exhaustive()
            }
        }

        impl $T {
            #[doc = concat!("The ", $what, "'s name (its Redis key).")]
            pub fn name(&self) -> &str {
                &self.core.name
            }
        }
    )*};
}
