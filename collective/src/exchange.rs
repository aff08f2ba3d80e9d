//! The sharded Prof-K's two collectives on any [`Collective`]: pass `&dyn Collective` (or a
//! concrete collective through [`AsExchange`]) to `profk::sharded::topk`.

use crate::Collective;
use profk::sharded::{Exchange, ExchangeError};

impl Exchange for dyn Collective + '_ {
    fn rank(&self) -> usize {
        Collective::rank(self)
    }

    fn world(&self) -> usize {
        Collective::world(self)
    }

    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, ExchangeError> {
        Ok(self.all_gather_bytes(mine)?)
    }

    fn all_reduce_sum(&self, counts: &mut [u64]) -> Result<(), ExchangeError> {
        Ok(self.all_reduce_sum_u64(counts)?)
    }
}

/// `c.as_exchange()` views any collective as the sharded selection's [`Exchange`].
pub trait AsExchange {
    fn as_exchange(&self) -> &(dyn Collective + '_);
}

impl<C: Collective> AsExchange for C {
    fn as_exchange(&self) -> &(dyn Collective + '_) {
        self
    }
}
