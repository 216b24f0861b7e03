#pragma once
// The syntax tree of a template: expressions and statements, each with the line it starts on.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/jinja/value.h"

namespace crl::jinja {

// The operators of kBinary and kCompare, resolved when parsing (comparing operator strings at every
// evaluation was a tenth of a render).
enum class Op : uint8_t {
  kNone,
  kAnd,
  kOr,
  kConcat,  // ~
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kIn,
  kNotIn
};
// The operator spelled `text` ("+", "and", "not in", ...); kNone for anything else.
Op operator_from(std::string_view text);

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // args = the items (tuples are lists)
    kDict,      // args = key, value, key, value, ...
    kGetattr,   // args[0].name
    kGetitem,   // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null where omitted)
    kUnary,     // op ("-", "+", "not") args[0]
    kBinary,    // args[0] op args[1]: + - * / // % ** ~ and or in "not in"
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (Python's chained comparison)
    kFilter,    // args[0] | name(args[1..], arg_names)
    kTest,      // args[0] is [not] name(args[1..]); negated
    kCall,      // args[0](args[1..], arg_names)
    kCondition  // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 1;
  Value value;
  std::string name;   // name, attribute, operator, filter or test
  Op op = Op::kNone;  // kBinary: name's operator
  std::vector<std::string> ops;
  std::vector<Op> compare_ops;  // kCompare: ops' operators
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::string> arg_names;  // for calls, filters, tests: "" for a positional argument
  bool negated = false;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,       // text
    kOutput,     // {{ expr }}
    kIf,         // conditions[k] -> bodies[k]; else_body
    kFor,        // for targets in expr [if condition]: body; else_body
    kSet,        // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,   // set targets[0] %}body{% endset
    kMacro,      // macro name(params = defaults): body
    kCallBlock,  // call(params) expr: body (the body is the macro `caller`)
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 1;
  std::string text;       // text; macro name
  std::string attribute;  // set ns.attribute
  ExprPtr expr;           // output, for iterable, set value, call expression
  ExprPtr condition;      // for ... if condition
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body, else_body;
  std::vector<std::string> targets;  // loop / set targets; macro and caller parameters
  std::vector<ExprPtr> defaults;     // macro parameter defaults (null: none)
};

}  // namespace crl::jinja
