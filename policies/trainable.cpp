#include "policies/trainable.h"

#include "engine/error.h"

namespace crl {

double Trainable::imitate(const std::vector<Trajectory>&, double) {
  throw Error("policy " + quote(state_type()), "warm_start",
              "this policy does not learn from demonstrations (the warm start needs one that does: neural)");
}

void Trainable::save(proto::checkpoint::PolicyState& out) const {
  out.Clear();
  out.set_type(state_type());
  out.set_shape(shape());
  do_save(out);
}

void Trainable::load(const proto::checkpoint::PolicyState& state, const std::string& where) {
  if (state.type() != state_type() || state.shape() != shape()) {
    throw Error(where, "policy",
                "the checkpoint holds a " + quote(state.type()) + " policy of shape " + quote(state.shape()) +
                    ", but this run's policy is " + quote(state_type()) + " of shape " + quote(shape()));
  }
  do_load(state, where);
}

}  // namespace crl
