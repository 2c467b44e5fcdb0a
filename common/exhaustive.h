// An overload set for std::visit with one case per alternative and no generic case (no `auto`
// parameter): visiting a variant that has an alternative without its own case does not compile,
// so a new action or event type cannot be ignored silently.
#pragma once

namespace kiln {

template <class... Case>
struct Exhaustive : Case... {
  using Case::operator()...;
};
template <class... Case>
Exhaustive(Case...) -> Exhaustive<Case...>;

}  // namespace kiln
