// RUN: parse %s | print | filecheck %s
// One concern: the printer chooses names.  Numbers are renumbered in order, name
// hints are kept and made unique with _0, _1, ... (even across sibling regions,
// where the input may reuse a name), and block labels print as ^bb0.  Optional
// syntax (omitted default properties, an unparenthesized single result type,
// comments) prints in full.

// CHECK-LABEL: "tile.kernel"() <{sym_name = "names"}> ({
// CHECK-NEXT: ^bb0(%x: view<[N], f32>):
// CHECK-NEXT: %0 = "tile.load"(%x) <{offsets = [0], shape = [4], fill = 0.0}> : (view<[N], f32>) -> (tile<[4], f32>)
// CHECK-NEXT: "region.parallel"() <{label = "p", axes = [#axis<i = 2>], scope = "AUTOMATIC"}> ({
// CHECK-NEXT: %t = "tile.unary"(%0) <{fn = #unary<neg>}> : (tile<[4], f32>) -> (tile<[4], f32>)
// CHECK-NEXT: %1 = "tile.unary"(%t) <{fn = #unary<exp>}>
// CHECK-NEXT: }) : () -> ()
// CHECK-NEXT: "region.parallel"() <{label = "q", axes = [#axis<j = 2>], scope = "AUTOMATIC"}> ({
// CHECK-NEXT: %t_0 = "tile.unary"(%0) <{fn = #unary<abs>}>
// CHECK-NEXT: }) : () -> ()
// CHECK-NEXT: %r = "region.loop"(%0) <{kind = #loop<serial>, label = "l", axes = [#axis<k = N>], window = 1, interval = 1, stages = []}> ({
// CHECK-NEXT: ^bb0(%c: tile<[4], f32>):
// CHECK-NEXT: "region.yield"(%c) : (tile<[4], f32>) -> ()
// CHECK-NEXT: }) : (tile<[4], f32>) -> (tile<[4], f32>)
// CHECK-NEXT: "tile.store"(%x, %r) <{offsets = [0]}> : (view<[N], f32>, tile<[4], f32>) -> ()
// CHECK-NEXT: }) : () -> ()

"tile.kernel"() <{sym_name = "names"}> ({
^entry(%x: view<[N], f32>):
  %7 = "tile.load"(%x) <{offsets = [0], shape = [4]}> : (view<[N], f32>) -> tile<[4], f32>  // no fill
  "region.parallel"() <{scope = "AUTOMATIC", label = "p", axes = [#axis<i = 2>]}> ({
    %t = "tile.unary"(%7) <{fn = #unary<neg>}> : (tile<[4], f32>) -> (tile<[4], f32>)
    %42 = "tile.unary"(%t) <{fn = #unary<exp>}> : (tile<[4], f32>) -> (tile<[4], f32>)
  }) : () -> ()
  "region.parallel"() <{label = "q", axes = [#axis<j = 2>], scope = "AUTOMATIC"}> ({
    %t = "tile.unary"(%7) <{fn = #unary<abs>}> : (tile<[4], f32>) -> (tile<[4], f32>)
  }) : () -> ()
  %r = "region.loop"(%7) <{kind = #loop<serial>, label = "l", axes = [#axis<k = N>]}> ({
  ^body(%c: tile<[4], f32>):
    "region.yield"(%c) : (tile<[4], f32>) -> ()
  }) : (tile<[4], f32>) -> (tile<[4], f32>)
  "tile.store"(%x, %r) <{offsets = [0]}> : (view<[N], f32>, tile<[4], f32>) -> ()
}) : () -> ()
