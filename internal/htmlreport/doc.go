// Package htmlreport turns a report directory's report.md and the images it
// references (the PNG plots) into one self-contained report.html: the plots
// inline as data: URIs, no scripts, no external files, a layout that reads
// on a phone. `quiot bench` and `ovsprobe lab` call WriteDir after writing
// report.md.
//
// 32-bit ARM builds (the Raspberry Pi Zero binary) leave the markdown
// renderer out to keep the binary within its size budget: there WriteDir
// writes nothing (the Pi draws no plots either), and `quiot bench --report
// DIR` on any other host writes report.html afterwards.
package htmlreport
