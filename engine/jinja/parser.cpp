#include "engine/jinja/parser.h"

#include <algorithm>
#include <cstdlib>

#include "engine/jinja/template_error.h"

namespace crl::jinja {

namespace {

using T = Token::Type;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name, int max_depth)
      : tokens_(tokens), name_(name), max_depth_(max_depth) {}

  Body run() {
    Body body = parse_body({});
    if (cur().type != T::kEnd) fail("unexpected " + describe(cur()));
    return body;
  }

 private:
  // Counts nesting (blocks and expressions) so that a hostile template cannot overflow the stack.
  struct DepthGuard {
    DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > p.max_depth_)
        throw TemplateError(ErrorKind::kLimit, p.name_, p.cur().line,
                            "nesting deeper than " + std::to_string(p.max_depth_) + " levels");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw TemplateError(ErrorKind::kSyntax, name_, cur().line, message);
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::kEnd:
        return "end of template";
      case T::kText:
        return "text";
      case T::kVariableBegin:
        return "\"{{\"";
      case T::kVariableEnd:
        return "\"}}\"";
      case T::kBlockBegin:
        return "\"{%\"";
      case T::kBlockEnd:
        return "\"%}\"";
      case T::kString:
        return "string literal";
      default:
        return "\"" + t.text + "\"";
    }
  }
  bool is_op(const char* op) const { return cur().type == T::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == T::kName && cur().text == name; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected \"") + op + "\", found " + describe(cur()));
    advance();
  }
  void expect_block_end() {
    if (cur().type != T::kBlockEnd) fail("expected \"%}\", found " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().type != T::kName) fail("expected a name, found " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }

  // Statements until "{% NAME" for one of `ends` (left unconsumed: the caller reads the end tag).
  Body parse_body(const std::vector<std::string>& ends) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::kEnd) {
        if (!ends.empty()) fail("missing {% " + ends.back() + " %}: the template ended");
        return body;
      }
      if (t.type == T::kText) {
        auto n = node(Node::Kind::kText);
        n->text = t.text;
        body.push_back(std::move(n));
        advance();
      } else if (t.type == T::kVariableBegin) {
        advance();
        auto n = node(Node::Kind::kOutput);
        n->expr = parse_tuple();
        if (cur().type != T::kVariableEnd) fail("expected \"}}\", found " + describe(cur()));
        advance();
        body.push_back(std::move(n));
      } else if (t.type == T::kBlockBegin) {
        const Token& keyword = peek();
        if (keyword.type == T::kName && std::find(ends.begin(), ends.end(), keyword.text) != ends.end()) {
          advance();  // leaves the keyword current
          return body;
        }
        advance();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  // The body of a block up to its closing tag `end` ("endfor", ...), which it consumes with its "%}".
  Body closed_body(const char* end) {
    Body body = parse_body({end});
    advance();
    expect_block_end();
    return body;
  }

  NodePtr node(Node::Kind kind) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = cur().line;
    return n;
  }

  NodePtr parse_statement() {
    if (cur().type != T::kName) fail("expected a statement name, found " + describe(cur()));
    const std::string keyword = cur().text;
    if (keyword == "if") return parse_if();
    if (keyword == "for") return parse_for();
    if (keyword == "set") return parse_set();
    if (keyword == "macro") return parse_macro();
    if (keyword == "call") return parse_call_block();
    if (keyword == "break" || keyword == "continue") {
      auto n = node(keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue);
      advance();
      expect_block_end();
      return n;
    }
    if (keyword == "generation") {  // Hugging Face's AssistantTracker marker: rendered as its body
      auto n = node(Node::Kind::kIf);
      advance();
      expect_block_end();
      auto always = std::make_unique<Expr>();
      always->value = Value(true);
      n->conditions.push_back(std::move(always));
      n->bodies.push_back(closed_body("endgeneration"));
      return n;
    }
    fail("unsupported statement {% " + keyword +
         " %} (supported: if, for, set, macro, call, break, continue, "
         "generation)");
  }

  NodePtr parse_if() {
    auto n = node(Node::Kind::kIf);
    advance();
    while (true) {
      n->conditions.push_back(parse_expression());
      expect_block_end();
      n->bodies.push_back(parse_body({"elif", "else", "endif"}));
      const std::string end = cur().text;
      advance();
      if (end == "elif") continue;
      expect_block_end();
      if (end == "else") n->else_body = closed_body("endif");
      return n;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets;
    const bool paren = is_op("(");
    if (paren) advance();
    targets.push_back(expect_name());
    while (is_op(",")) {
      advance();
      if (cur().type != T::kName) break;
      targets.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return targets;
  }

  NodePtr parse_for() {
    auto n = node(Node::Kind::kFor);
    advance();
    n->targets = parse_targets();
    if (!is_name("in")) fail("expected \"in\" in a for loop, found " + describe(cur()));
    advance();
    n->expr = parse_tuple(/*with_condition=*/false);
    if (is_name("if")) {
      advance();
      n->condition = parse_expression();
    }
    if (is_name("recursive")) fail("recursive for loops are not supported");
    expect_block_end();
    n->body = parse_body({"else", "endfor"});
    const std::string end = cur().text;
    advance();
    expect_block_end();
    if (end == "else") n->else_body = closed_body("endfor");
    return n;
  }

  NodePtr parse_set() {
    auto n = node(Node::Kind::kSet);
    advance();
    const std::string first = expect_name();
    if (is_op(".")) {
      advance();
      n->attribute = expect_name();
      n->targets.push_back(first);
    } else {
      n->targets.push_back(first);
      while (is_op(",")) {
        advance();
        n->targets.push_back(expect_name());
      }
    }
    if (cur().type == T::kBlockEnd && n->attribute.empty() && n->targets.size() == 1) {
      n->kind = Node::Kind::kSetBlock;
      advance();
      n->body = closed_body("endset");
      return n;
    }
    expect_op("=");
    n->expr = parse_tuple();
    expect_block_end();
    return n;
  }

  // Items separated by commas up to the operator `close` (a trailing comma allowed), which it consumes.
  template <typename Item>
  void comma_separated(const char* close, Item item) {
    for (bool first = true; !is_op(close); first = false) {
      if (!first) expect_op(",");
      if (is_op(close)) break;
      item();
    }
    advance();
  }

  void parse_params(Node& n) {
    expect_op("(");
    comma_separated(")", [&] {
      n.targets.push_back(expect_name());
      if (is_op("=")) {
        advance();
        n.defaults.push_back(parse_expression());
      } else {
        n.defaults.push_back(nullptr);
      }
    });
  }

  NodePtr parse_macro() {
    auto n = node(Node::Kind::kMacro);
    advance();
    n->text = expect_name();
    parse_params(*n);
    expect_block_end();
    n->body = closed_body("endmacro");
    return n;
  }

  NodePtr parse_call_block() {
    auto n = node(Node::Kind::kCallBlock);
    advance();
    if (is_op("(")) parse_params(*n);
    n->expr = parse_expression();
    if (n->expr->kind != Expr::Kind::kCall) fail("{% call %} needs a macro call");
    expect_block_end();
    n->body = closed_body("endcall");
    return n;
  }

  // ---- expressions ----

  ExprPtr expr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // An expression, or several separated by commas (a tuple, evaluated as a list).
  ExprPtr parse_tuple(bool with_condition = true) {
    const int line = cur().line;
    ExprPtr first = with_condition ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto list = expr(Expr::Kind::kList, line);
    list->args.push_back(std::move(first));
    while (is_op(",")) {
      advance();
      if (cur().type == T::kBlockEnd || cur().type == T::kVariableEnd || is_op(")") || is_name("if")) break;
      list->args.push_back(with_condition ? parse_expression() : parse_or());
    }
    return list;
  }

  ExprPtr parse_expression() {
    DepthGuard guard(*this);
    ExprPtr value = parse_or();
    while (is_name("if")) {
      auto cond = expr(Expr::Kind::kCondition, cur().line);
      advance();
      cond->args.push_back(parse_or());
      cond->args.push_back(std::move(value));
      if (is_name("else")) {
        advance();
        cond->args.push_back(parse_expression());
      } else {
        cond->args.push_back(nullptr);
      }
      value = std::move(cond);
    }
    return value;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = expr(Expr::Kind::kBinary, line);
    e->name = op;
    e->op = operator_from(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // One left-associative level of binary operators: `next (op next)*` while `match` accepts the current
  // token (jinja2's parse_or, parse_and, parse_math1, parse_concat, parse_math2, parse_pow).
  template <typename Next, typename Match>
  ExprPtr left_associative(Next next, Match match) {
    ExprPtr left = next();
    while (match()) {
      const std::string op = cur().text;
      const int line = cur().line;
      advance();
      left = binary(op, std::move(left), next(), line);
    }
    return left;
  }

  ExprPtr parse_or() {
    return left_associative([&] { return parse_and(); }, [&] { return is_name("or"); });
  }

  ExprPtr parse_and() {
    return left_associative([&] { return parse_not(); }, [&] { return is_name("and"); });
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = expr(Expr::Kind::kUnary, cur().line);
      advance();
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().type == T::kOperator && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                         cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == T::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = expr(Expr::Kind::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->compare_ops.push_back(operator_from(op));
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    return left_associative([&] { return parse_concat(); }, [&] { return is_op("+") || is_op("-"); });
  }

  ExprPtr parse_concat() {
    return left_associative([&] { return parse_math2(); }, [&] { return is_op("~"); });
  }

  ExprPtr parse_math2() {
    return left_associative([&] { return parse_pow(); },
                            [&] { return is_op("*") || is_op("/") || is_op("//") || is_op("%"); });
  }

  ExprPtr parse_pow() {
    return left_associative([&] { return parse_unary(true); }, [&] { return is_op("**"); });
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = expr(Expr::Kind::kUnary, cur().line);
      node->name = cur().text;
      advance();
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.type) {
      case T::kName: {
        auto e = expr(Expr::Kind::kLiteral, line);
        if (t.text == "true" || t.text == "True") {
          e->value = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        advance();
        return e;
      }
      case T::kString: {
        std::string s;
        while (cur().type == T::kString) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        auto e = expr(Expr::Kind::kLiteral, line);
        e->value = Value(std::move(s));
        return e;
      }
      case T::kInteger: {
        auto e = expr(Expr::Kind::kLiteral, line);
        errno = 0;
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) fail("integer literal " + t.text + " does not fit 64 bits");
        e->value = Value(static_cast<int64_t>(v));
        advance();
        return e;
      }
      case T::kFloat: {
        auto e = expr(Expr::Kind::kLiteral, line);
        e->value = Value(std::strtod(t.text.c_str(), nullptr));
        advance();
        return e;
      }
      case T::kOperator:
        if (t.text == "(") {
          advance();
          if (is_op(")")) {  // the empty tuple
            advance();
            return expr(Expr::Kind::kList, line);
          }
          ExprPtr inner = parse_tuple();
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          advance();
          auto e = expr(Expr::Kind::kList, line);
          comma_separated("]", [&] { e->args.push_back(parse_expression()); });
          return e;
        }
        if (t.text == "{") {
          advance();
          auto e = expr(Expr::Kind::kDict, line);
          comma_separated("}", [&] {
            e->args.push_back(parse_expression());
            expect_op(":");
            e->args.push_back(parse_expression());
          });
          return e;
        }
        break;
      default:
        break;
    }
    fail("unexpected " + describe(t) + " in an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const int line = cur().line;
      if (is_op(".")) {
        advance();
        auto e = expr(Expr::Kind::kGetattr, line);
        if (cur().type == T::kInteger) {  // x.0 is x[0]
          e->kind = Expr::Kind::kGetitem;
          auto index = expr(Expr::Kind::kLiteral, line);
          index->value = Value(static_cast<int64_t>(std::strtoll(cur().text.c_str(), nullptr, 10)));
          advance();
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(index));
        } else {
          e->name = expect_name();
          e->args.push_back(std::move(node));
        }
        node = std::move(e);
      } else if (is_op("[")) {
        advance();
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {  // calls follow getattr and getitem too: x.split('a')[-1]
        auto e = expr(Expr::Kind::kCall, line);
        e->args.push_back(std::move(node));
        parse_call_args(*e);
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!is_op(":") && !is_op("]")) parts[k] = parse_expression();
      if (k < 2 && is_op(":")) {
        slice = true;
        advance();
      } else {
        break;
      }
    }
    expect_op("]");
    auto e = expr(slice ? Expr::Kind::kSlice : Expr::Kind::kGetitem, line);
    e->args.push_back(std::move(target));
    if (!slice && !parts[0]) fail("empty subscript []");
    for (int k = 0; k < (slice ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    comma_separated(")", [&] {
      if (is_op("*") || is_op("**")) fail("*args and **kwargs are not supported");
      if (cur().type == T::kName && peek().type == T::kOperator && peek().text == "=") {
        e.arg_names.push_back(cur().text);
        advance();
        advance();
      } else {
        e.arg_names.push_back("");
      }
      e.args.push_back(parse_expression());
    });
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      const int line = cur().line;
      if (is_op("|")) {
        advance();
        auto e = expr(Expr::Kind::kFilter, line);
        e->name = expect_name();
        while (is_op(".")) {
          advance();
          e->name += "." + expect_name();
        }
        e->args.push_back(std::move(node));
        if (is_op("(")) parse_call_args(*e);
        node = std::move(e);
      } else if (is_name("is")) {
        advance();
        auto e = expr(Expr::Kind::kTest, line);
        if (is_name("not")) {
          e->negated = true;
          advance();
        }
        e->name = expect_name();
        e->args.push_back(std::move(node));
        if (is_op("(")) {
          parse_call_args(*e);
        } else if ((cur().type == T::kName && cur().text != "else" && cur().text != "or" &&
                    cur().text != "and" && cur().text != "if" && cur().text != "in" && cur().text != "not" &&
                    cur().text != "is") ||
                   cur().type == T::kString || cur().type == T::kInteger || cur().type == T::kFloat ||
                   is_op("[") || is_op("{") || is_op("(")) {
          e->args.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`, `is sameas none`
          e->arg_names.push_back("");
        }
        node = std::move(e);
      } else if (is_op("(")) {
        auto e = expr(Expr::Kind::kCall, line);
        e->args.push_back(std::move(node));
        parse_call_args(*e);
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& tokens_;
  const std::string& name_;
  const int max_depth_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Op operator_from(std::string_view text) {
  static constexpr std::pair<std::string_view, Op> kOperators[] = {
      {"and", Op::kAnd}, {"or", Op::kOr}, {"~", Op::kConcat},    {"+", Op::kAdd}, {"-", Op::kSub},
      {"*", Op::kMul},   {"/", Op::kDiv}, {"//", Op::kFloorDiv}, {"%", Op::kMod}, {"**", Op::kPow},
      {"==", Op::kEq},   {"!=", Op::kNe}, {"<", Op::kLt},        {"<=", Op::kLe}, {">", Op::kGt},
      {">=", Op::kGe},   {"in", Op::kIn}, {"not in", Op::kNotIn}};
  for (const auto& [spelling, op] : kOperators) {
    if (spelling == text) return op;
  }
  return Op::kNone;
}

Body parse(const std::vector<Token>& tokens, const std::string& template_name, int max_depth) {
  return Parser(tokens, template_name, max_depth).run();
}

}  // namespace crl::jinja
