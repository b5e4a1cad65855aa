package model

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// The final fit on all conditions uses gonum (coefficients and their
// covariance); the many small fits inside selection use lsq (select.go).

// design returns the design matrix with non-constant columns centred
// and scaled, the scale factors and the means, for a well-conditioned fit.
func design(cols [][]float64, rows []int) (*mat.Dense, []float64, []float64) {
	p := len(cols)
	x := mat.NewDense(len(rows), p, nil)
	scale := make([]float64, p)
	center := make([]float64, p)
	for j, c := range cols {
		if j == 0 {
			scale[j], center[j] = 1, 0
		} else {
			mu, sd := 0.0, 0.0
			for _, r := range rows {
				mu += c[r]
			}
			mu /= float64(len(rows))
			for _, r := range rows {
				sd += (c[r] - mu) * (c[r] - mu)
			}
			sd = math.Sqrt(sd / float64(len(rows)))
			if sd == 0 {
				sd = 1
			}
			scale[j], center[j] = sd, mu
		}
		for i, r := range rows {
			x.Set(i, j, (c[r]-center[j])/scale[j])
		}
	}
	return x, scale, center
}

// solve fits y on cols restricted to rows; it returns the coefficients in
// the original units and (X'X)^-1 in the original units.
func solve(cols [][]float64, y []float64, rows []int) ([]float64, *mat.SymDense, error) {
	x, scale, center := design(cols, rows)
	p := len(cols)
	yv := mat.NewVecDense(len(rows), nil)
	for i, r := range rows {
		yv.SetVec(i, y[r])
	}
	var xtx mat.SymDense
	xtx.SymOuterK(1, x.T())
	var chol mat.Cholesky
	if ok := chol.Factorize(&xtx); !ok {
		return nil, nil, errors.New("singular design: terms are collinear")
	}
	var xty mat.VecDense
	xty.MulVec(x.T(), yv)
	var bz mat.VecDense
	if err := chol.SolveVecTo(&bz, &xty); err != nil {
		return nil, nil, fmt.Errorf("least squares: %w", err)
	}
	var covZ mat.SymDense
	if err := chol.InverseTo(&covZ); err != nil {
		return nil, nil, fmt.Errorf("least squares: %w", err)
	}
	// b = A bz with A[0][0]=1, A[0][j]=-center_j/scale_j, A[j][j]=1/scale_j.
	a := mat.NewDense(p, p, nil)
	a.Set(0, 0, 1)
	for j := 1; j < p; j++ {
		a.Set(0, j, -center[j]/scale[j])
		a.Set(j, j, 1/scale[j])
	}
	var b mat.VecDense
	b.MulVec(a, &bz)
	var tmp, cov mat.Dense
	tmp.Mul(a, &covZ)
	cov.Mul(&tmp, a.T())
	sym := mat.NewSymDense(p, nil)
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			sym.SetSym(i, j, cov.At(i, j))
		}
	}
	return b.RawVector().Data, sym, nil
}

func ols(cols [][]float64, y []float64) (beta []float64, cov *mat.SymDense, rss float64, err error) {
	rows := make([]int, len(y))
	for i := range rows {
		rows[i] = i
	}
	beta, cov, err = solve(cols, y, rows)
	if err != nil {
		return nil, nil, 0, err
	}
	for i := range y {
		r := y[i] - predictRow(cols, beta, i)
		rss += r * r
	}
	return beta, cov, rss, nil
}

func predictRow(cols [][]float64, beta []float64, i int) float64 {
	v := 0.0
	for j, c := range cols {
		v += beta[j] * c[i]
	}
	return v
}
