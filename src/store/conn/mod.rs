//! Connections and what every call shares: the connections to a node, a
//! cluster and replicas (`connect`), the scripts assembled from
//! `src/scripts/` (`scripts`), what each script touches (`touches`),
//! MessagePack as the scripts read it (`msgpack`), and the registry of
//! board tags that tells a Redis that lost data (`registry`).

pub(super) mod connect;
pub(super) mod msgpack;
pub(super) mod registry;
pub(super) mod scripts;
pub mod touches;
