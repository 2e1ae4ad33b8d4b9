// GradientTape semantics (tf.GradientTape): persistence, watching, variables, unconnected
// sources, stop_gradient, custom gradients, jacobians, intermediate sources,
// output_gradients and error messages.
#include <thread>

#include "tests/autograd/autograd_test_util.h"

using namespace strata;
using namespace strata::autograd;
using strata::testing::check_gradient;
using strata::testing::rand64;
using Catch::Matchers::Contains;

TEST_CASE("tape: gradient of x^2 + 3x", "[tape]") {
  Tensor x = tensor({1, 2, 3});
  GradientTape tape;
  tape.watch(x);
  Tensor y = sum(x * x + x * 3.0);
  Tensor g = tape.gradient(y, x);
  REQUIRE_CLOSE(g, tensor({5, 7, 9}));
}

TEST_CASE("tape: non-persistent tapes allow one gradient call, persistent ones several", "[tape]") {
  Tensor x = tensor({1, 2});
  SECTION("non-persistent") {
    GradientTape tape;
    tape.watch(x);
    Tensor y = sum(x * x);
    REQUIRE_CLOSE(tape.gradient(y, x), tensor({2, 4}));
    REQUIRE_THROWS_AS(tape.gradient(y, x), Error);
    REQUIRE_THROWS_WITH(tape.gradient(y, x),
                        Contains("non-persistent tape can compute gradients only once") &&
                            Contains("persistent=true"));
    REQUIRE(tape.num_recorded_ops() == 0);  // freed after the first call
  }
  SECTION("persistent") {
    GradientTape tape(/*persistent=*/true);
    REQUIRE(tape.persistent());
    tape.watch(x);
    Tensor y = sum(x * x);
    Tensor z = sum(exp(x));
    REQUIRE_CLOSE(tape.gradient(y, x), tensor({2, 4}));
    REQUIRE_CLOSE(tape.gradient(y, x), tensor({2, 4}));
    REQUIRE_CLOSE(tape.gradient(z, x), exp(x));
    REQUIRE(tape.num_recorded_ops() > 0);
    tape.reset();
    REQUIRE(tape.num_recorded_ops() == 0);
    REQUIRE_FALSE(tape.gradient(y, x).defined());  // reset forgot everything
  }
}

TEST_CASE("tape: only watched tensors get gradients", "[tape]") {
  Tensor a = tensor({1, 2});
  Tensor b = tensor({3, 4});
  GradientTape tape(/*persistent=*/true);
  tape.watch(a);
  Tensor y = sum(a * b);
  std::vector<Tensor> g = tape.gradient(y, std::vector<Tensor>{a, b});
  REQUIRE_CLOSE(g[0], b);
  REQUIRE_FALSE(g[1].defined());
  // Ops on unwatched tensors alone are not recorded at all.
  const size_t before = tape.num_recorded_ops();
  Tensor unrelated = exp(b) * b;
  REQUIRE(tape.num_recorded_ops() == before);
  // Ops run before watch() are not on the tape.
  Tensor c = tensor({5, 6});
  Tensor early = c * c;
  tape.watch(c);
  REQUIRE_FALSE(tape.gradient(sum(early), c).defined());
}

TEST_CASE("tape: trainable variables are watched on read, non-trainable ones are not", "[tape][variable]") {
  Variable w(tensor({1, 2, 3}), strata::testing::var_options("w"));
  Variable frozen(tensor({4, 5, 6}), strata::testing::var_options("frozen", false));
  SECTION("auto-watch") {
    GradientTape tape;
    Tensor y = sum(w.read() * frozen.read());
    REQUIRE(tape.watched_variables().size() == 1);
    REQUIRE(tape.watched_variables()[0] == w);
    std::vector<Tensor> g = tape.gradient(y, std::vector<Variable>{w, frozen});
    REQUIRE_CLOSE(g[0], tensor({4, 5, 6}));
    REQUIRE_FALSE(g[1].defined());
  }
  SECTION("explicit watch of a non-trainable variable") {
    GradientTape tape;
    tape.watch(frozen);
    Tensor y = sum(w.read() * frozen.read());
    std::vector<Tensor> g = tape.gradient(y, std::vector<Variable>{w, frozen});
    REQUIRE_CLOSE(g[0], tensor({4, 5, 6}));
    REQUIRE_CLOSE(g[1], tensor({1, 2, 3}));
  }
  SECTION("watch_accessed_variables=false") {
    GradientTape tape(/*persistent=*/false, /*watch_accessed_variables=*/false);
    Tensor x = tensor({1, 1, 1});
    tape.watch(x);
    Tensor y = sum(w.read() * x);
    REQUIRE(tape.watched_variables().empty());
    std::vector<Tensor> g = tape.gradient(y, std::vector<Tensor>{w.value(), x});
    REQUIRE_FALSE(g[0].defined());
    REQUIRE_CLOSE(g[1], tensor({1, 2, 3}));
  }
  SECTION("value() does not watch") {
    GradientTape tape;
    Tensor y = sum(w.value() * 2.0);
    REQUIRE(tape.watched_variables().empty());
    REQUIRE_FALSE(tape.gradient(y, std::vector<Variable>{w})[0].defined());
  }
  SECTION("a variable read before the tape starts is still watched when read again") {
    Tensor early = w.read();
    GradientTape tape;
    Tensor y = sum(square(w.read()));
    REQUIRE_CLOSE(tape.gradient(y, std::vector<Variable>{w})[0], tensor({2, 4, 6}));
  }
}

TEST_CASE("tape: unconnected sources", "[tape]") {
  Tensor x = tensor({1, 2});
  Tensor z = tensor({{1, 2}, {3, 4}});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  tape.watch(z);
  Tensor y = sum(x * 3.0);
  REQUIRE_FALSE(tape.gradient(y, z).defined());
  Tensor zero = tape.gradient(y, z, UnconnectedGradients::Zero);
  REQUIRE(zero.defined());
  REQUIRE(zero.shape() == z.shape());
  REQUIRE(zero.dtype() == z.dtype());
  REQUIRE_CLOSE(zero, zeros({2, 2}));
  // The target itself is a source: its gradient is the seed (ones).
  REQUIRE_CLOSE(tape.gradient(y, y), ones({}));
  // A source never recorded at all (not even watched).
  Tensor never = tensor({7});
  REQUIRE_FALSE(tape.gradient(y, never).defined());
  REQUIRE_CLOSE(tape.gradient(y, never, UnconnectedGradients::Zero), tensor({0}));
}

TEST_CASE("tape: stop_gradient blocks the gradient", "[tape]") {
  Tensor x = tensor({1, 2, 3});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor y = sum(x * stop_gradient(x));  // d/dx = stop(x) = x, not 2x
  REQUIRE_CLOSE(tape.gradient(y, x), x);
  Tensor only_stopped = sum(stop_gradient(x * x));
  REQUIRE_FALSE(tape.gradient(only_stopped, x).defined());
  // StopRecording pauses the tape: ops in its scope are invisible.
  Tensor paused;
  {
    StopRecording stop;
    REQUIRE_FALSE(is_recording());
    paused = x * x;
  }
  REQUIRE(is_recording());
  REQUIRE_FALSE(tape.gradient(sum(paused), x).defined());
}

TEST_CASE("tape: custom_gradient", "[tape][custom]") {
  // softplus with a user VJP: g * sigmoid(x).
  auto softplus_custom = [](const Tensor& x) {
    return custom_gradient({x}, [](const std::vector<Tensor>& xs) {
      Tensor out = log(1.0 + exp(xs[0]));
      Tensor x0 = xs[0];
      CustomVjp vjp = [x0](const Tensor& g) { return std::vector<Tensor>{g * sigmoid(x0)}; };
      return CustomResult{out, vjp};
    });
  };
  Tensor x = rand64({5}, 3, -2, 2);
  SECTION("forward value and gradient") {
    GradientTape tape;
    tape.watch(x);
    Tensor y = softplus_custom(x);
    REQUIRE(tape.num_recorded_ops() == 1);  // only the custom node, not the forward's internals
    REQUIRE_CLOSE(y, softplus(x), 1e-12, 1e-12);
    REQUIRE_CLOSE(tape.gradient(sum(y * 2.0), x), 2.0 * sigmoid(x), 1e-12, 1e-12);
  }
  SECTION("the custom VJP is what the tape uses") {
    // A deliberately different gradient (3x the true one) shows up verbatim.
    Tensor y;
    GradientTape tape;
    tape.watch(x);
    y = custom_gradient({x}, [](const std::vector<Tensor>& xs) {
      Tensor x0 = xs[0];
      return CustomResult{square(x0), [x0](const Tensor& g) { return std::vector<Tensor>{g * 6.0 * x0}; }};
    });
    REQUIRE_CLOSE(tape.gradient(sum(y), x), 6.0 * x, 1e-12, 1e-12);
    // ... and gradcheck catches that it is wrong.
    GradcheckResult r = gradcheck(
        [](const std::vector<Tensor>& xs) {
          return custom_gradient({xs[0]}, [](const std::vector<Tensor>& in) {
            Tensor x0 = in[0];
            return CustomResult{square(x0), [x0](const Tensor& g) { return std::vector<Tensor>{g * 6.0 * x0}; }};
          });
        },
        {x});
    REQUIRE_FALSE(r.ok);
    REQUIRE_THAT(r.message, Contains("analytic") && Contains("numeric"));
  }
  SECTION("a nested tape differentiates through the custom VJP") {
    GradientTape outer;
    outer.watch(x);
    Tensor first;
    {
      GradientTape inner;
      inner.watch(x);
      first = inner.gradient(sum(softplus_custom(x)), x);  // sigmoid(x)
    }
    Tensor s = sigmoid(x);
    REQUIRE_CLOSE(outer.gradient(sum(first), x), s * (1.0 - s), 1e-12, 1e-12);
  }
  SECTION("two inputs, one without a gradient") {
    Tensor a = rand64({3}, 4), b = rand64({3}, 5);
    GradientTape tape;
    tape.watch(a);
    tape.watch(b);
    Tensor y = custom_gradient({a, b}, [](const std::vector<Tensor>& xs) {
      Tensor b0 = xs[1];
      return CustomResult{xs[0] * xs[1], [b0](const Tensor& g) { return std::vector<Tensor>{g * b0, Tensor()}; }};
    });
    std::vector<Tensor> g = tape.gradient(sum(y), std::vector<Tensor>{a, b});
    REQUIRE_CLOSE(g[0], b);
    REQUIRE_FALSE(g[1].defined());
  }
  SECTION("a VJP returning the wrong number of gradients is an error") {
    GradientTape tape;
    tape.watch(x);
    Tensor y = custom_gradient({x}, [](const std::vector<Tensor>& xs) {
      return CustomResult{xs[0] * 2.0, [](const Tensor& g) { return std::vector<Tensor>{g, g}; }};
    });
    REQUIRE_THROWS_WITH(tape.gradient(sum(y), x), Contains("custom_gradient") && Contains("2 tensors for 1 inputs"));
  }
  SECTION("custom_gradient passes gradcheck with a correct VJP") {
    check_gradient("custom softplus", [&](const std::vector<Tensor>& xs) { return softplus_custom(xs[0]); },
                   {x});
  }
}

TEST_CASE("tape: jacobian of a small function", "[tape]") {
  Tensor x = Tensor::from_vector(std::vector<double>{0.5, -1.0, 2.0});
  Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  GradientTape tape;
  tape.watch(x);
  Tensor y = matmul(a, x) + sum(square(x));  // y_i = sum_j a_ij x_j + |x|^2
  Tensor j = tape.jacobian(y, x);
  REQUIRE(j.shape() == Shape{2, 3});
  // dy_i/dx_j = a_ij + 2 x_j
  REQUIRE_CLOSE(j, a + 2.0 * expand_dims(x, 0), 1e-12, 1e-12);
  REQUIRE_THROWS_WITH(tape.gradient(sum(y), x), Contains("only once"));
}

TEST_CASE("tape: jacobian of a matrix-valued function", "[tape]") {
  Tensor x = rand64({2, 2}, 8);
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor y = exp(x);
  Tensor j = tape.jacobian(y, x);
  REQUIRE(j.shape() == Shape{2, 2, 2, 2});
  std::vector<double> jv = j.to_vector<double>();
  std::vector<double> ev = exp(x).to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 4; ++k) REQUIRE(jv[size_t(i * 4 + k)] == Approx(i == k ? ev[size_t(i)] : 0.0));
  }
  Tensor other = tensor({1.0f});
  tape.watch(other);
  REQUIRE_FALSE(tape.jacobian(y, other).defined());
  Tensor jz = tape.jacobian(y, other, UnconnectedGradients::Zero);
  REQUIRE(jz.shape() == Shape{2, 2, 1});
  REQUIRE_CLOSE(jz, zeros({2, 2, 1}));
}

TEST_CASE("tape: gradient with respect to an intermediate tensor", "[tape]") {
  Tensor x = tensor({1, 2, 3});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor h = x * 2.0;  // intermediate
  Tensor y = sum(square(h));
  REQUIRE_CLOSE(tape.gradient(y, h), 2.0 * h);
  // Both at once: the chain continues past the intermediate to x.
  std::vector<Tensor> g = tape.gradient(y, std::vector<Tensor>{h, x});
  REQUIRE_CLOSE(g[0], 2.0 * h);
  REQUIRE_CLOSE(g[1], 8.0 * x);
}

TEST_CASE("tape: output_gradients seed a non-scalar target", "[tape]") {
  Tensor x = tensor({1, 2, 3});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor y = x * x;
  Tensor seed = tensor({1, 0.5, -2});
  std::vector<Tensor> g = tape.gradient(y, std::vector<Tensor>{x}, {seed});
  REQUIRE_CLOSE(g[0], tensor({2, 2, -12}));
  // A float64 seed for a float32 target is cast.
  Tensor seed64 = Tensor::from_vector(std::vector<double>{1, 1, 1});
  REQUIRE_CLOSE(tape.gradient(y, std::vector<Tensor>{x}, {seed64})[0], tensor({2, 4, 6}));
  REQUIRE_THROWS_WITH(tape.gradient(y, std::vector<Tensor>{x}, {tensor({1, 2})}),
                      Contains("output_gradients") && Contains("[3]"));
}

TEST_CASE("tape: misuse raises strata::Error with a clear message", "[tape][errors]") {
  Tensor x = tensor({1, 2, 3});
  SECTION("non-scalar target without output_gradients") {
    GradientTape tape;
    tape.watch(x);
    Tensor y = x * 2.0;
    REQUIRE_THROWS_AS(tape.gradient(y, x), Error);
    REQUIRE_THROWS_WITH(tape.gradient(y, x), Contains("target has shape [3]") &&
                                                 Contains("needs output_gradients"));
  }
  SECTION("watching an integer tensor") {
    GradientTape tape;
    Tensor i = Tensor::from_vector(std::vector<int64_t>{1, 2});
    REQUIRE_THROWS_AS(tape.watch(i), Error);
    REQUIRE_THROWS_WITH(tape.watch(i), Contains("only floating-point tensors can be watched") &&
                                           Contains("int64"));
  }
  SECTION("gradient twice on a non-persistent tape") {
    GradientTape tape;
    tape.watch(x);
    Tensor y = sum(x);
    tape.gradient(y, x);
    REQUIRE_THROWS_WITH(tape.gradient(y, x), Contains("GradientTape.gradient") &&
                                                 Contains("only once"));
  }
  SECTION("an undefined target or source") {
    GradientTape tape;
    tape.watch(x);
    REQUIRE_THROWS_WITH(tape.gradient(Tensor(), x), Contains("undefined target"));
    GradientTape tape2;
    REQUIRE_THROWS_WITH(tape2.gradient(sum(x), Tensor()), Contains("undefined source"));
  }
  SECTION("an integer target") {
    GradientTape tape;
    REQUIRE_THROWS_WITH(tape.gradient(Tensor::from_vector(std::vector<int64_t>{1}), x),
                        Contains("floating-point"));
  }
}

TEST_CASE("tape: tapes are thread-local", "[tape]") {
  Tensor x = tensor({1, 2});
  GradientTape tape;
  tape.watch(x);
  Tensor from_thread;
  bool recording_there = true;
  std::thread t([&] {
    recording_there = is_recording();
    from_thread = x * x;  // another thread: not on this thread's tape
  });
  t.join();
  REQUIRE_FALSE(recording_there);
  REQUIRE(tape.num_recorded_ops() == 0);
  REQUIRE_FALSE(tape.gradient(sum(from_thread), x).defined());
}

TEST_CASE("tape: nested tapes each record what they watch", "[tape]") {
  Tensor a = tensor({2});
  Tensor b = tensor({3});
  GradientTape outer(/*persistent=*/true);
  outer.watch(a);
  GradientTape inner(/*persistent=*/true);
  inner.watch(b);
  Tensor y = sum(a * b);
  REQUIRE_CLOSE(outer.gradient(y, a), tensor({3}));
  REQUIRE_FALSE(outer.gradient(y, b).defined());
  REQUIRE_CLOSE(inner.gradient(y, b), tensor({2}));
  REQUIRE_FALSE(inner.gradient(y, a).defined());
}

TEST_CASE("tape: gradients accumulate over every use of a tensor", "[tape]") {
  Tensor x = tensor({1, 2});
  GradientTape tape;
  tape.watch(x);
  Tensor y = sum(x * x + exp(x) + x);  // 2x + e^x + 1
  REQUIRE_CLOSE(tape.gradient(y, x), 2.0 * x + exp(x) + 1.0);
}

TEST_CASE("tape: StopRecording pauses the tapes older than it, not new ones", "[tape]") {
  Tensor x = tensor({1, 2});
  GradientTape outer(/*persistent=*/true);
  outer.watch(x);
  Tensor inner_grad;
  Tensor stopped;
  {
    StopRecording stop;
    REQUIRE_FALSE(is_recording());
    stopped = x * x;  // invisible to `outer`
    {
      // A tape made inside the scope records (tf: a new tape inside stop_recording).
      GradientTape inner;
      inner.watch(x);
      REQUIRE(is_recording());
      inner_grad = inner.gradient(sum(exp(x)), x);
    }
    REQUIRE_FALSE(is_recording());
    Tensor still_stopped = x * 3.0;
    REQUIRE_FALSE(outer.gradient(sum(still_stopped), x).defined());
    {
      StopRecording nested;
      REQUIRE_FALSE(is_recording());
    }
    REQUIRE_FALSE(is_recording());
  }
  REQUIRE(is_recording());
  REQUIRE_CLOSE(inner_grad, exp(x));
  REQUIRE_FALSE(outer.gradient(sum(stopped), x).defined());
  Tensor after = x * x;
  REQUIRE_CLOSE(outer.gradient(sum(after), x), tensor({2, 4}));
}

TEST_CASE("tape: a custom_gradient forward that uses a tape internally", "[tape][custom]") {
  // The forward computes its output with its own tape (paused outer tapes must not
  // stop it); the outer tape only sees the custom node.
  Tensor x = tensor({0.5f, -1.0f});
  GradientTape outer;
  outer.watch(x);
  Tensor y = custom_gradient({x}, [](const std::vector<Tensor>& xs) {
    GradientTape t;
    t.watch(xs[0]);
    Tensor d = t.gradient(sum(square(xs[0])), xs[0]);  // 2x
    Tensor x0 = xs[0];
    return CustomResult{d, [](const Tensor& g) { return std::vector<Tensor>{g * 2.0}; }};
  });
  REQUIRE_CLOSE(y, tensor({1.0f, -2.0f}));
  REQUIRE(outer.num_recorded_ops() == 1);
  REQUIRE_CLOSE(outer.gradient(sum(y), x), tensor({2, 2}));
}


TEST_CASE("tape: a saved tensor written in place after it was recorded is refused, not used", "[tape][errors]") {
  // One persistent tape, an update of `a` between two gradient calls: b's gradient needs
  // a's value at recording time (PyTorch raises here; it used to come out silently wrong).
  Variable a(tensor({1, 2})), b(tensor({3, 4}));
  GradientTape tape(/*persistent=*/true);
  Tensor y = sum(mul(a.read(), b.read()));
  const Tensor ga = tape.gradient(y, {a})[0];
  REQUIRE_CLOSE(ga, tensor({3, 4}));
  a.assign_sub(ga);
  REQUIRE_THROWS_WITH(tape.gradient(y, {b}),
                      Contains("input 0 of mul") && Contains("was written in place 1 time(s) after it was recorded"));

  // a's own gradient reads only b, which is unchanged: still right after the update.
  REQUIRE_CLOSE(tape.gradient(y, {a})[0], tensor({3, 4}));

  // Every gradient first, then the updates: fine.
  Variable c(tensor({1, 2})), d(tensor({3, 4}));
  GradientTape both(/*persistent=*/true);
  Tensor z = sum(mul(c.read(), d.read()));
  const Tensor gc = both.gradient(z, {c})[0], gd = both.gradient(z, {d})[0];
  REQUIRE_CLOSE(gd, tensor({1, 2}));
  c.assign_sub(gc);

  // A plain tensor overwritten with copy_, and a saved output (exp's).
  Tensor x = tensor({0.5, 1.5});
  GradientTape plain(/*persistent=*/true);
  plain.watch(x);
  Tensor e = exp(x);
  Tensor s = sum(e);
  e.copy_(tensor({0, 0}));
  REQUIRE_THROWS_WITH(plain.gradient(s, x), Contains("the output of exp"));
}
